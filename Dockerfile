FROM python:3.11-slim

WORKDIR /app
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
COPY pyproject.toml README.md ./
COPY normwatch ./normwatch
COPY server ./server
COPY client ./client
COPY dashboard ./dashboard
COPY migrations ./migrations
RUN pip install --no-cache-dir '.[dashboard,parquet]'

ENV NORMWATCH_HOST=0.0.0.0 NORMWATCH_PORT=8000
EXPOSE 8000
HEALTHCHECK --interval=10s --timeout=3s --retries=5 \
  CMD python -c "import httpx; httpx.get('http://127.0.0.1:8000/healthz').raise_for_status()"
CMD ["normwatch", "serve", "--no-migrate"]
