# Sluice: a small, non-root image of the gateway.
#
#   docker build --build-arg SLUICE_GIT_HASH=$(git rev-parse --short=12 HEAD) -t sluice .
#   docker run --rm -p 8080:8080 -p 127.0.0.1:9901:9901 \
#     -v $PWD/sluice.toml:/etc/sluice/sluice.toml:ro -e OPENAI_API_KEY -e SLUICE_ADMIN_TOKEN sluice
#
# In a container the config must listen on 0.0.0.0 (server.listen, server.admin_listen), and
# a non-loopback admin address needs server.admin_token. docs/OPERATIONS.md has the smoke test.

# --- build: the release binary, with the git hash passed in (.git is not in the context).
FROM rust:1-bookworm AS build
WORKDIR /src
ARG SLUICE_GIT_HASH=unknown
ENV SLUICE_GIT_HASH=${SLUICE_GIT_HASH}
COPY . .
RUN cargo build --release --locked -p sluice \
 && strip target/release/sluice \
 && target/release/sluice --version

# --- run: glibc and libgcc only (TLS roots are compiled in), user 65532, no shell.
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/sluice /usr/local/bin/sluice
COPY --chown=65532:65532 deploy/container.toml /etc/sluice/sluice.toml
USER 65532:65532
EXPOSE 8080 9901
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["serve", "/etc/sluice/sluice.toml", "--log-format", "json"]
