from normwatch.cli import main

raise SystemExit(main())
