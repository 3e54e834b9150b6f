# atwhois serve: the local HTTP cache of verified ATProto identities.
FROM python:3.11-slim
WORKDIR /app
COPY requirements.lock ./
# The locked versions first (a layer that changes only with the lock), then atwhois itself.
RUN pip install --no-cache-dir -r requirements.lock
COPY pyproject.toml README.md LICENSE ./
COPY atwhois ./atwhois
RUN pip install --no-cache-dir --no-deps . && useradd --create-home atwhois && mkdir /data \
    && chown atwhois /data
USER atwhois
# Everything the daemon keeps lives on the /data volume: the cache, the audit history and
# the PLC mirror (and whatever else keeps files in the user's data or cache folder).
ENV ATWHOIS_HOST=0.0.0.0 ATWHOIS_PORT=2584 ATWHOIS_CACHE=sqlite:////data/cache.db \
    ATWHOIS_AUDIT_DB=/data/audit.db ATWHOIS_PLC_DB=/data/plc-mirror.db \
    XDG_DATA_HOME=/data/ XDG_CACHE_HOME=/data/
EXPOSE 2584
HEALTHCHECK --interval=30s --timeout=3s CMD python -c "import urllib.request; urllib.request.urlopen('http://127.0.0.1:${ATWHOIS_PORT}/_health', timeout=2)"
ENTRYPOINT ["atwhois", "serve"]
