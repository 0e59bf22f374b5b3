# Airlock. `make test` is what CI runs (.ci/run); it installs what the tests need.
GO      ?= go
PKGS    ?= ./...
TIMEOUT ?= 20m
# Fuzz steps are bounded by a count of inputs, not by time: load cannot fail them.
FUZZCOUNT ?= 20000x
# Debian's Python, for which python3-httpx and python3-pytest are installed (not a pyenv or venv one).
PYTHON  ?= /usr/bin/python3
NPM     ?= npm
NODE    ?= node

.PHONY: all build run test deps lint unit fuzz sdk-python-test sdk-typescript-test bench perf perf-ha crash clean

all: build

build:
	$(GO) build -trimpath -o bin/broker ./cmd/broker

# The throwaway broker with a demo upstream (no config, no other process).
run:
	$(GO) run ./cmd/broker dev

# Everything CI checks: tools, formatting, vet, module tidiness, the race-enabled suite, short fuzzing,
# the Python and TypeScript SDKs' suites.
test: deps lint unit fuzz sdk-python-test sdk-typescript-test

deps:
	@scripts/deps.sh

lint:
	@fmt=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$fmt" ]; then echo "gofmt needed:"; echo "$$fmt"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) mod tidy -diff

unit:
	$(GO) test -race -count=1 -timeout $(TIMEOUT) $(PKGS)

# The SDKs' suites, each against a real `broker dev` (bin/broker) on loopback with random ports.
sdk-python-test: build
	AIRLOCK_BROKER=$(CURDIR)/bin/broker $(PYTHON) -m pytest -q -p no:cacheprovider sdk/python/tests

sdk-typescript-test: build
	cd sdk/typescript && $(NPM) ci --no-audit --no-fund && ./node_modules/.bin/tsc -p tsconfig.json && \
	  AIRLOCK_BROKER=$(CURDIR)/bin/broker $(NODE) --test test/*.test.mjs

# Each fuzz target for FUZZCOUNT inputs (the seed corpus also runs in `unit`).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzCanonicalPath$$' -fuzztime $(FUZZCOUNT) ./internal/grants
	$(GO) test -run '^$$' -fuzz '^FuzzParseJSON$$' -fuzztime $(FUZZCOUNT) ./internal/grants
	$(GO) test -run '^$$' -fuzz '^FuzzParseJSONMatchesTokenParser$$' -fuzztime $(FUZZCOUNT) ./internal/grants
	$(GO) test -run '^$$' -fuzz '^FuzzBodyDecodesAsChecked$$' -fuzztime $(FUZZCOUNT) ./internal/grants
	$(GO) test -run '^$$' -fuzz '^FuzzFoldKey$$' -fuzztime $(FUZZCOUNT) ./internal/grants
	$(GO) test -run '^$$' -fuzz '^FuzzEventEncoding$$' -fuzztime $(FUZZCOUNT) ./internal/audit
	$(GO) test -run '^$$' -fuzz '^FuzzS3Operation$$' -fuzztime $(FUZZCOUNT) ./internal/upstream
	$(GO) test -run '^$$' -fuzz '^FuzzScrub$$' -fuzztime 2000x ./internal/upstream
	$(GO) test -run '^$$' -fuzz '^FuzzRecordSessionID$$' -fuzztime $(FUZZCOUNT) ./internal/store/boltstore
	$(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZCOUNT) ./internal/mcp

# Hot-path benchmarks (figures in docs/performance.md).
bench:
	$(GO) test -run '^$$' -bench . -benchmem $(PKGS)

clean:
	rm -rf bin test-artifacts sdk/typescript/dist sdk/typescript/node_modules

# The side-by-side load test (broker vs bare reverse proxy); rewrites docs/performance.md. Each
# measured round of both proxies is CPU-profiled (debug.pprof) for the per-stage breakdown, and
# allocations and context switches per call are read beside the ratios (--breakdown=false: none).
perf: build
	$(GO) run ./cmd/airlock-bench --broker bin/broker --duration 5s --out docs/performance.md.tmp $(ARGS)
	@{ cat docs/performance.md.tmp; echo; cat docs/performance-notes.md; } > docs/performance.md && rm docs/performance.md.tmp

# 1 and 3 brokers on one PostgreSQL (a server of the bench's own) beside bbolt and the bare
# proxy, alternated in the same run; rewrites docs/performance-ha.md. Not part of `make test`.
perf-ha: build
	$(GO) run ./cmd/airlock-bench --broker bin/broker --store postgres --replicas 1,3 --duration 5s --out docs/performance-ha.md.tmp $(ARGS)
	@{ cat docs/performance-ha.md.tmp; echo; cat docs/performance-ha-notes.md; } > docs/performance-ha.md && rm docs/performance-ha.md.tmp

# The long crash trials (CI runs 3 as part of `make test`).
crash:
	$(GO) test -count=1 -run '^TestCrashTrials$$' -v ./cmd/broker -crash.trials=100
