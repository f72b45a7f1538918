# XCT — run `make help` for the targets.
#
# Two commands set up everything on a fresh machine with Go installed:
#   make run    build and start the embedded cluster, play the demo, serve
#   make test   vet and the whole test suite with the race detector

SHELL := /usr/bin/env bash
GO    ?= go
BIN   := $(CURDIR)/bin
BUF   := $(BIN)/buf
GOLANGCI_LINT := $(BIN)/golangci-lint
# buf is pinned in tools/go.mod and golangci-lint in tools/golangci/go.mod
# (each in its own module so their dependencies never meet ours); the protoc
# plugins are pinned as tool lines in go.mod, so generated code matches the
# protobuf runtime we link.

.DEFAULT_GOAL := help

.PHONY: help
help: ## Show the targets
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*##/ {printf "  \033[1m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: run
run: build ## Start the embedded cluster, play the bundled demo, serve until Ctrl-C
	$(BIN)/xct dev --demo

.PHONY: build
build: ## Build bin/xct
	$(GO) build -o $(BIN)/xct ./cmd/xct
	$(GO) build -o $(BIN)/lctl ./cmd/lctl

# Debian packages the browser and client tests need, installed by
# `make test-deps` when missing (as root, or through sudo). The tests that
# need them are required to run under `make test` (XCT_REQUIRE_* below); a
# plain `go test ./...` skips them, saying why, where they are missing.
TEST_APT_PACKAGES :=
# Clients in other languages: protoc and the gRPC Python plugin generate
# gen/python (`make generate`); the Python examples run on Debian's runtime.
# The packaged Python client installs into a virtual environment
# (python3-venv, pip) built with Debian's setuptools and wheel.
CLIENTS_APT_PACKAGES := protobuf-compiler protobuf-compiler-grpc python3-grpcio python3-protobuf python3-yaml \
	python3-venv python3-pip python3-setuptools python3-wheel
TEST_APT_PACKAGES += $(CLIENTS_APT_PACKAGES)
# The visual debugger's browser tests drive Debian's headless Chromium
# (chromedp; lctl/debugger and test/e2e, XCT_REQUIRE_BROWSER below).
TEST_APT_PACKAGES += chromium
# The executor's OS sandbox for shell.exec and stdio MCP servers (bwrap;
# the sandbox tests are required under make test: XCT_REQUIRE_SANDBOX).
TEST_APT_PACKAGES += bubblewrap
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: test-deps
test-deps: ## Install what the browser and client tests need (Debian packages, npm lock files)
	@missing=""; for p in $(TEST_APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then echo "test-deps: installing$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq --no-install-recommends $$missing; fi

# The TypeScript client's npm packages, from the lock file: protoc-gen-es
# generates gen/ts, the example and test/clients use the rest.
CLIENTS_TS := examples/clients/ts
$(CLIENTS_TS)/node_modules/.package-lock.json: $(CLIENTS_TS)/package.json $(CLIENTS_TS)/package-lock.json
	cd $(CLIENTS_TS) && npm ci --no-audit --no-fund

.PHONY: clients-deps
# Only the clients' Debian packages: `make generate` needs no browser.
clients-deps: $(CLIENTS_TS)/node_modules/.package-lock.json ## Install what generating and testing the TypeScript and Python clients needs
	@$(MAKE) --no-print-directory test-deps TEST_APT_PACKAGES="$(CLIENTS_APT_PACKAGES)"

# The longest packages first (test/attack, lctl and services/tracer take
# ~3 min each under -race, most others seconds): go test starts packages in
# the order given, and a long one started last runs on alone while the
# other core idles. ./... adds the rest, once. Since session 20 the tests
# of test/attack, test/e2e and services/tracer run in parallel within their
# package (t.Parallel, -parallel = GOMAXPROCS); test/attack is still the
# longest (~200 CPU-s under -race), so the order stays.
TEST_FIRST := ./test/attack/ ./lctl/ ./services/tracer/ ./lctl/debugger/ ./test/e2e/ \
	./services/executor/ ./services/orchestrator/ ./lctl/cli/
# Packages run at once: one more than CI's two cores. The long packages
# wait much of their time (clusters starting, Chromium, child processes,
# NATS round trips): two at a time used ~1.5 of the two cores (ci16c:
# 19.3 CPU-minutes in 12.75 minutes).
TEST_P ?= 3

.PHONY: test
test: export XCT_REQUIRE_CLIENTS := 1
test: export XCT_REQUIRE_BROWSER := 1
test: export XCT_REQUIRE_SANDBOX := 1
test: test-deps clients-deps ## go vet, then every test with the race detector
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 25m -p $(TEST_P) $(TEST_FIRST) ./...
	cd deploy/k8s && $(GO) test -race -count=1 ./...

# The fault-injection suite (test/chaos, docs/chaos.md). make test runs its
# short seeded version (TestChaosShort); the long one runs here only: one
# NATS node and a 3-node R3 cluster, every process its own, each on its own
# network namespace (needs root; ip and tc from iproute2) for partitions and
# latency. CHAOS_SEED=0 draws a seed from the clock; the summary prints it.
CHAOS_RUNS ?= 300
CHAOS_FAULTS ?= 150
CHAOS_SEED ?= 0
CHAOS_CONCURRENCY ?= 4
CHAOS_APT_PACKAGES := iproute2

.PHONY: chaos
chaos: ## The long fault-injection run: CHAOS_RUNS=300 CHAOS_FAULTS=150 CHAOS_SEED=0 (one summary line at the end)
	@$(MAKE) --no-print-directory test-deps TEST_APT_PACKAGES="$(CHAOS_APT_PACKAGES)"
	$(GO) test ./test/chaos -run '^TestChaosLong$$' -count=1 -timeout 150m -v -args -chaos.long \
		-chaos.runs=$(CHAOS_RUNS) -chaos.faults=$(CHAOS_FAULTS) -chaos.seed=$(CHAOS_SEED) -chaos.concurrency=$(CHAOS_CONCURRENCY)

# The container engine for `make image`: docker or podman, whichever is
# installed (CONTAINER_ENGINE=... to choose).
CONTAINER_ENGINE ?= $(shell command -v docker 2>/dev/null || command -v podman 2>/dev/null)
IMAGE ?= xct
TAG   ?= dev

.PHONY: image
image: ## Build the container image xct:dev with docker or podman (IMAGE=, TAG= to name it)
	@if [ -z "$(CONTAINER_ENGINE)" ]; then \
		echo "make image: no container engine: install docker or podman, or set CONTAINER_ENGINE" >&2; exit 1; fi
	@if ! $(CONTAINER_ENGINE) info >/dev/null 2>&1; then \
		echo "make image: $(CONTAINER_ENGINE) is installed but cannot reach its engine (is the daemon running?)" >&2; exit 1; fi
	$(CONTAINER_ENGINE) build -t $(IMAGE):$(TAG) .

.PHONY: ui
ui: ## Rebuild the debugger page (ui/debugger) into lctl/debugger/dist (needs Node.js and npm)
	cd ui/debugger && npm ci && npm run build

.PHONY: bench
bench: ## Run the benchmarks (results depend on the machine: see README)
	$(GO) test -run='^$$' -bench=. -benchmem ./...

# The floor (../shared/bench/floor beside the repository, FLOOR= to move
# it): bare gRPC + JetStream doing what one step must do. bench-step runs it
# and our step benchmarks interleaved in one invocation and prints the
# ratios ours / floor per concurrency level (REPS=, SYNC=1 for fsync always).
FLOOR ?= $(CURDIR)/../shared/bench/floor
REPS  ?= 3
.PHONY: bench-step
bench-step: ## Governed step vs the bare gRPC + JetStream floor, interleaved, with ratios (SYNC=1 adds fsync always)
	$(GO) run ./test/benchstep -floor $(FLOOR) -reps $(REPS) $(if $(SYNC),-sync)

# bench-shapes measures shapes of a step's durable writes (today's, pipelined,
# one message per decision point, group commit across runs) against each other
# and the floor, interleaved (issue 14, session 19; docs/performance.md).
.PHONY: bench-shapes
bench-shapes: ## A step's write shapes vs the floor, interleaved, with ratios and CPU per step (SYNC=1 adds fsync always)
	$(GO) run ./test/stepshapes -floor $(FLOOR) -reps $(REPS) $(if $(SYNC),-sync)

.PHONY: fuzz
fuzz: ## Fuzz the parsers and guards for 30s each
	$(GO) test -run='^$$' -fuzz=FuzzParseDecision -fuzztime=30s ./internal/wire
	$(GO) test -run='^$$' -fuzz=FuzzDepth -fuzztime=30s ./internal/wire
	$(GO) test -run='^$$' -fuzz=FuzzVerdictCheck -fuzztime=30s ./internal/verdict
	$(GO) test -run='^$$' -fuzz='^FuzzProtectedPaths$$' -fuzztime=30s ./services/executor
	$(GO) test -run='^$$' -fuzz='^FuzzFSPath$$' -fuzztime=30s ./services/executor

.PHONY: generate
generate: $(BUF) clients-deps ## Regenerate gen/ from proto/ (Go, TypeScript, Python), and the clients' package files
	$(BUF) generate
	@# buf empties gen/ first: the packages' own files come from packaging/.
	cp packaging/python/pyproject.toml packaging/python/README.md gen/python/
	cp -R packaging/python/xct_client gen/python/
	cp packaging/ts/package.json packaging/ts/tsconfig.json packaging/ts/README.md gen/ts/

.PHONY: check-generate
check-generate: generate ## Fail if the committed generated code is stale
	@if [ -n "$$(git status --porcelain -- gen)" ]; then \
		echo "gen/ is stale: run 'make generate' and commit the result"; git status --porcelain -- gen; exit 1; fi

.PHONY: lint
lint: $(BUF) $(GOLANGCI_LINT) clients-deps ## gofmt, go vet, golangci-lint, buf lint, and the generated-code check
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '^gen/')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(GOLANGCI_LINT) run ./...
	$(BUF) lint
	$(MAKE) check-generate

$(BUF): tools/go.mod tools/go.sum
	cd tools && $(GO) build -o $(BUF) github.com/bufbuild/buf/cmd/buf

$(GOLANGCI_LINT): tools/golangci/go.mod tools/golangci/go.sum
	cd tools/golangci && $(GO) build -o $(GOLANGCI_LINT) github.com/golangci/golangci-lint/v2/cmd/golangci-lint

.PHONY: clean
clean: ## Remove build output and the embedded cluster's data (.xct)
	rm -rf $(BIN) .xct
