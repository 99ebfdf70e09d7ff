# make test: the whole suite, with its own set-up (redis-server when missing).
# make bench: the benchmarks (not part of make test).
GO ?= go

.PHONY: test check-format vet unit bench fuzz
test: 
	./scripts/ensure-redis.sh
	$(MAKE) check-format vet unit

check-format:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...
	cd bench && $(GO) vet ./...

unit:
	$(GO) test -race -shuffle=on -count=1 -timeout 20m ./...
	cd bench && $(GO) test -race -count=1 ./loadgen

bench:
	cd bench && $(GO) test -run '^$$' -bench . -benchmem -count 10 -timeout 60m ./... | tee bench.txt
