// The login page's half of a login link (<base>/login#token=<secret>).
//
// The secret travels in the URL fragment, which the browser never sends to the server, so
// it never reaches an access log. This script takes it out of the address bar, puts it in
// the form, and submits the form only when the server said the page was reached directly
// (typed, bookmarked, or a link on this site: data-autosubmit="1"). Reached from another
// site, the page asks first: otherwise any page could log a visitor into its own project.
(function () {
  "use strict";
  const form = document.getElementById("login-form");
  if (!form) {
    return; // Dash loads every script of assets/ on its own pages too.
  }
  const fragment = new URLSearchParams(window.location.hash.slice(1));
  const query = new URLSearchParams(window.location.search);
  if (fragment.has("token") || query.has("token")) {
    query.delete("token");
    const search = query.toString();
    window.history.replaceState(
      null,
      "",
      window.location.pathname + (search ? "?" + search : ""),
    );
  }
  const token = fragment.get("token");
  if (!token) {
    return;
  }
  form.elements.namedItem("token").value = token;
  if (form.dataset.autosubmit === "1") {
    form.submit();
    return;
  }
  document.getElementById("confirm").hidden = false;
  document.getElementById("login").focus();
})();
