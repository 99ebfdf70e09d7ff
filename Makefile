# make test: the whole suite, with its own set-up (redis-server and memcached when missing,
#   envoyproxy/ratelimit built from the Go module proxy for make compat).
# make bench: the benchmarks (not part of make test).
# make regions: the multi-region simulation's standard table (not part of
#   make test; its short smoke run is, in bench/regions); docs/regions.md.
# make compat: the differential test against envoyproxy/ratelimit (part of make test).
GO ?= go
# The reference's version, as in bench/loadgen/run.sh.
REFERENCE_VERSION ?= v1.4.1-0.20260122083618-3fb702589d36

# make release: static binaries for every platform, with SHA-256 sums, in dist/.
# make binary: one of them (GOOS, GOARCH, BIN); the Dockerfile builds with it.
# The version is the tag at HEAD (else "devel", and sluice version shows the
# build's module version or commit); set VERSION and COMMIT to override.
VERSION ?= $(shell git describe --tags --exact-match 2>/dev/null || echo devel)
COMMIT ?= $(shell git rev-parse HEAD 2>/dev/null)
GOOS ?= $(shell $(GO) env GOOS)
GOARCH ?= $(shell $(GO) env GOARCH)
DIST ?= dist
BIN ?= $(DIST)/sluice-$(VERSION)-$(GOOS)-$(GOARCH)
PLATFORMS ?= linux/amd64 linux/arm64 darwin/amd64 darwin/arm64
LDFLAGS = -s -w -X main.version=$(VERSION) -X main.commit=$(COMMIT)

# make proto: regenerate the store API's Go code (api/sluice/store/v1) from
# its .proto, with protoc and the generators at the versions below, built
# from the Go module proxy into a temporary directory.
PROTOC_GEN_GO_VERSION ?= v1.36.12
PROTOC_GEN_GO_GRPC_VERSION ?= v1.6.2

.PHONY: test check-format vet unit bench regions fuzz compat binary release release-check proto
test: 
	./scripts/ensure-redis.sh
	./scripts/ensure-memcached.sh
	./scripts/ensure-nginx.sh
	./scripts/ensure-prometheus.sh
	./scripts/ensure-chromium.sh
	$(MAKE) check-format vet
	$(MAKE) -j2 unit compat
	$(MAKE) release-check

check-format:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	cd bench && $(GO) vet ./...

# The Redis-backed tests (those that start a server with
# internal/testserver/redistest, listed as they run) then run a second time
# on Valkey when valkey-server is present (VALKEY_SERVER, else
# ../shared/valkey/, else PATH), and are skipped with one line when it is not.
# That second pass is about the server: it runs without the race detector,
# which the first pass ran over the same code.
# Four test binaries run at a time (go test's default is one per core):
# most of a package's time is spent waiting on real servers and windows of
# the clock, not computing, so two cores keep four busy. make test runs
# make compat beside it, for the same reason.
TESTP ?= 4
unit:
	@rec=$$(mktemp) && trap 'rm -f "$$rec"' EXIT && \
	echo "$(GO) test -race -p $(TESTP) -shuffle=on -count=1 -timeout 20m ./..." && \
	REDISTEST_RECORD="$$rec" $(GO) test -race -p $(TESTP) -shuffle=on -count=1 -timeout 20m ./... && \
	echo "cd bench && $(GO) test -race -count=1 ./loadgen ./deviation ./regions/..." && \
	(cd bench && REDISTEST_RECORD="$$rec" $(GO) test -race -count=1 ./loadgen ./deviation ./regions/...) && \
	GO="$(GO)" ./scripts/valkey-tests.sh "$$rec" -p $(TESTP) -shuffle=on -count=1 -timeout 20m

bench:
	cd bench && $(GO) test -run '^$$' -bench . -benchmem -count 10 -timeout 60m ./... | tee bench.txt

# About nine minutes: twenty-five runs of 10-12 s on loopback, each with its own
# redis-server, WAN proxies and member processes. Prints the table and
# writes the reports to bench/regions.json.
regions:
	./scripts/ensure-redis.sh
	cd bench && $(GO) run ./regions -table standard -json regions.json

# Builds envoyproxy/ratelimit's service_cmd from the Go module proxy into a
# temporary directory and runs bench/compat against it, once: the two
# services count in windows of the wall clock, and the test runs each
# window-bound sequence where enough of its window is left, again only when
# the clock proves that a boundary passed during it, and compares reset
# times within what the time between the two answers explains.
compat:
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	echo "building envoyproxy/ratelimit $(REFERENCE_VERSION)" && \
	GOBIN="$$tmp" $(GO) install github.com/envoyproxy/ratelimit/src/service_cmd@$(REFERENCE_VERSION) && \
	cd bench && SLUICE_REFERENCE="$$tmp/service_cmd" $(GO) test -count=1 -timeout 30m ./compat

proto:
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	GOBIN="$$tmp" $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION) && \
	GOBIN="$$tmp" $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION) && \
	PATH="$$tmp:$$PATH" $(GO) generate ./api/...

binary:
	CGO_ENABLED=0 GOOS=$(GOOS) GOARCH=$(GOARCH) $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/sluice

release:
	rm -rf $(DIST) && mkdir -p $(DIST)
	@for p in $(PLATFORMS); do \
		echo "building $$p"; \
		$(MAKE) --no-print-directory binary GOOS=$${p%/*} GOARCH=$${p#*/} BIN=$(DIST)/sluice-$(VERSION)-$${p%/*}-$${p#*/} || exit 1; \
	done
	cp LICENSE NOTICE $(DIST)/
	cd $(DIST) && sha256sum sluice-* > SHA256SUMS && cat SHA256SUMS

# The release's build on two of its platforms, so that it cannot rot (part
# of make test): static linux/arm64 and darwin/arm64 binaries, built as make
# release and the Dockerfile build them, into a temporary directory.
release-check:
	@grep -q '^RUN make binary ' Dockerfile || { echo "Dockerfile: no 'RUN make binary' line"; exit 1; }
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && \
	$(MAKE) --no-print-directory release DIST="$$tmp/dist" PLATFORMS='linux/arm64 darwin/arm64' VERSION=v0.0.0-check >/dev/null && \
	cd "$$tmp/dist" && sha256sum -c --quiet SHA256SUMS && \
	test "$$(head -c 4 sluice-v0.0.0-check-linux-arm64 | od -An -c | tr -d ' ')" = '177ELF' && \
	echo "release-check: $$(ls sluice-* | tr '\n' ' ')built, checksums verified"
