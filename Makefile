# SWD build, test and measurement targets. `make help` lists them.
SHELL := /bin/bash
GO ?= go
BIN := bin
TOOLS := $(CURDIR)/.tools
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/swd-project/swd/internal/node.Version=$(VERSION)
STATICCHECK_MOD := honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOVULNCHECK_MOD := golang.org/x/vuln/cmd/govulncheck@v1.9.0
DEADCODE_MOD := golang.org/x/tools/cmd/deadcode@v0.52.0
PROTOC_GEN_GO := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC := google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0
TEST_TIMEOUT ?= 25m
# HOGS is how many busy loops `make test-loaded` runs beside the suite.
HOGS ?= 2
FUZZTIME ?= 30s

.PHONY: help build test test-short lint cross deadcode bench bench-conns bench-transfers bench-gossip bench-handoff bench-goodput bench-peers bench-affinity bench-hardening bench-sqs demo paper proto fuzz clean tools chaos

help: ## list targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## build swd, swdctl, dummyapp, loadgen into bin/ (static)
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

test: test-deps build ## run every test with the race detector (end-to-end tests use bin/; test-deps installs Prometheus, Chromium, HAProxy, nginx and Caddy where it can)
	$(GO) test -race -timeout $(TEST_TIMEOUT) ./...

.PHONY: test-loaded
test-loaded: ## `make test` with HOGS (2) busy loops taking the CPUs, as on a busy 2-core CI machine; no cached results (scripts/under-load.sh)
	GOFLAGS="-count=1 $$GOFLAGS" bash scripts/under-load.sh -n $(HOGS) $(MAKE) test

test-short: build ## quick test run without the race detector
	$(GO) test -short -timeout 10m ./...

tools: ## install lint tools into .tools/
	@mkdir -p $(TOOLS)
	@test -x $(TOOLS)/staticcheck || GOBIN=$(TOOLS) $(GO) install $(STATICCHECK_MOD)
	@test -x $(TOOLS)/govulncheck || GOBIN=$(TOOLS) $(GO) install $(GOVULNCHECK_MOD)
	@test -x $(TOOLS)/deadcode || GOBIN=$(TOOLS) $(GO) install $(DEADCODE_MOD)

lint: tools cross deadcode ## go vet, gofmt check, staticcheck, govulncheck, cross-builds, dead code
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(TOOLS)/staticcheck ./...
	@echo "$(TOOLS)/govulncheck ./..."; $(TOOLS)/govulncheck $(if $(GOVULNDB),-db $(GOVULNDB)) ./...; rc=$$?; \
	if [ $$rc -ne 0 ] && [ $$rc -ne 3 ]; then echo "govulncheck could not check the dependencies (exit $$rc): is its vulnerability database reachable? GOVULNDB=file:///path/to/copy uses a local copy"; fi; exit $$rc

# The portable packages (pure policies, simulator, queue, workloads, stats)
# must stay free of OS-specific code; everything else must at least build on
# macOS (swdctl, loadgen and the local cluster run there, without Linux's
# parent-death signal).
PORTABLE := ./internal/policy/... ./internal/sim/... ./internal/queue/... ./internal/workload/... ./internal/stats/... ./internal/swderr/... ./internal/affinity/... ./internal/cohort/... ./internal/cost/...

deadcode: tools ## functions no program or test reaches (deadcode -test): fails unless there are none
	@out=$$($(TOOLS)/deadcode -test ./...) || exit 1; if [ -n "$$out" ]; then echo "$$out"; echo "unreachable code: delete it or use it"; exit 1; fi

cross: ## GOOS=darwin go build ./... and GOOS=windows go vet of the portable packages
	GOOS=darwin $(GO) build ./...
	GOOS=windows $(GO) vet $(PORTABLE)

bench: build ## print performance figures: micro-benchmarks (a Pull round trip beside raw TCP and UDP, in one process and between two, among them), swd's added latency and throughput, one transfer hop, core placement (pinned apart vs unpinned)
	$(GO) test -run '^$$' -bench . -benchmem ./internal/queue/ ./internal/policy/ ./internal/sim/ ./internal/cohort/ ./internal/cost/ ./internal/transfer/
	$(GO) run ./test/bench/proxy
	$(GO) run ./test/bench/pinning --bin-dir $(BIN)

bench-conns: build ## swd's memory with ~20,000 idle client connections (RSS before/after)
	$(GO) run ./test/bench/conns --bin-dir $(BIN)

bench-transfers: build ## transfers per request of ll, nu, nu-exact at 50 % and 90 % load, real cluster vs simulator
	$(GO) run ./test/bench/transfers --bin-dir $(BIN)

bench-work: build ## the work load index on a real 8-node cluster: mixed workload at 80 % load, p99 under --load-index count vs work, learnt costs (~13 min)
	$(GO) run ./test/bench/work --bin-dir $(BIN)

bench-goodput: build ## goodput at 1x, 2x and 5x capacity for every policy (no congestion collapse)
	$(GO) run ./test/bench/goodput --bin-dir $(BIN)

bench-handoff: build ## hand-off cost (decision to the peer's queue) of small, 1 MiB and spooled 4/16 MiB bodies on loopback, and what the transfer-cost rule changes on a 4-node cluster (~2 min)
	$(GO) run ./test/bench/handoff --bin-dir $(BIN)

bench-gossip: ## gossip entry age, bytes/s and CPU per node at 16, 32 and 64 nodes
	$(GO) run ./test/bench/gossip -nodes 16,32,64

bench-hardening: build ## issue 17's figures: app in-flight with leaving clients, 200s with a dead app, a GET during a slow upload, RSS of stalled uploads (BASE_BIN=dir compares another build)
	$(GO) run ./test/bench/hardening --bin-dir $(BIN) $(if $(BASE_BIN),--base-bin-dir $(BASE_BIN))

chaos: build ## 8 nodes at 70 % load for 60 s, a node SIGKILLed and restarted every 10 s; prints every request's fate
	$(GO) run ./test/chaos/cmd/chaos --bin-dir $(BIN)

paper: build ## the paper's setup for real: 16 nodes, standard workload, rates 40-320, rr/ct/ll/nu (about 20 minutes)
	$(BIN)/loadgen compare --local 16 --workload standard --rates 40,120,200,240,280,320 \
		--warmup 5s --duration 30s --cooldown 2s --policies rr,ct,ll,nu --limit-from nu@320 \
		--progress lines --out results/paper

proto: ## regenerate proto/swd/v1 Go code (installs protoc via apt-get if missing)
	@command -v protoc >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq protobuf-compiler)
	@mkdir -p $(TOOLS)
	@test -x $(TOOLS)/protoc-gen-go || GOBIN=$(TOOLS) $(GO) install $(PROTOC_GEN_GO)
	@test -x $(TOOLS)/protoc-gen-go-grpc || GOBIN=$(TOOLS) $(GO) install $(PROTOC_GEN_GO_GRPC)
	PATH=$(TOOLS):$$PATH protoc -I proto --go_out=proto --go_opt=paths=source_relative \
		--go-grpc_out=proto --go-grpc_opt=paths=source_relative proto/swd/v1/swd.proto

fuzz: ## run every fuzz target for FUZZTIME each
	@for pkg in $$($(GO) list ./...); do \
	  for t in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "== $$pkg $$t"; $(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

# make bench-peers: SWD's policies beside the balancers users deploy instead,
# on the same NODES sleep-mode dummyapps (m = 1) with the same requests.
# NODES, RATES, DURATION (per rate) shorten or widen the run. The capacity
# limits are haproxy-cq's 95th/99th/99.5th percentile response times at the
# second-highest rate (360 req/s, 90 % of 8 nodes' capacity, by default), as
# the paper took N's; the highest rate shows where each system crosses them.
# PASS_DURATION is each pass-through run's length.
NODES ?= 8
RATES ?= 200,240,280,320,360,400
DURATION ?= 30s
PEER_POLICIES ?= rr,ct,cq,nu,nu-exact,steal
PEERS ?= haproxy-cq,haproxy-leastconn,nginx-leastconn,caddy-leastconn
comma := ,
peer_rates = $(subst $(comma), ,$(RATES))
LIMIT_FROM ?= haproxy-cq@$(word $(shell n=$(words $(peer_rates)); echo $$(( n > 1 ? n - 1 : 1 ))),$(peer_rates))
PASS_DURATION ?= 10s

bench-peers: build ## SWD's policies beside HAProxy, nginx, Caddy on the same apps and requests (capacity ratios to haproxy-cq), then each one's pass-through cost (~35 min; NODES=, RATES=, DURATION=)
	@for p in haproxy nginx caddy; do bash scripts/ensure-$$p.sh; done
	$(BIN)/loadgen compare --local $(NODES) --concurrency 1 --workload burst --scale 0.5 --seed 1 --rates $(RATES) \
		--warmup 5s --duration $(DURATION) --cooldown 2s --settle 1s --policies $(PEER_POLICIES) --peers $(PEERS) \
		--reference haproxy-cq --limit-from $(LIMIT_FROM) --progress lines --out results/peers
	$(GO) run ./test/bench/peers --bin-dir $(BIN) --duration $(PASS_DURATION) --peers $(PEERS)

# make bench-affinity: key affinity and the cohort order (paper 000) on 4
# nodes whose apps cache 50 keys each, at cache ratios 0.5 and 0.9: hit
# ratio, capacity at the 99th percentile limit (500 ms) of plain FIFO,
# affinity, affinity + cohort and HAProxy's bounded-load consistent hash on
# the same requests, then the keys remapped when one node dies
# (docs/affinity.md). AFFINITY_ARGS passes more flags (e.g. --duration 10s).
AFFINITY_ARGS ?=
bench-affinity: build ## key affinity + cohort order vs FIFO vs HAProxy's consistent hash at cache ratios 0.5 and 0.9; keys remapped when a node dies (~25 min)
	@bash scripts/ensure-haproxy.sh >/dev/null 2>&1 || true
	$(GO) run ./test/bench/affinity --bin-dir $(BIN) $(AFFINITY_ARGS)

# make bench-sqs: session throughput under overload (paper 001,
# docs/admission.md): closed-loop session clients (login, 3 light, 1 heavy
# page; 200 ms think time, 2 s client timeout) against one node whose app's
# heavy page thrashes beyond 2 at once, swept from below saturation to 4x
# it, with --admission none, page and sqs; then the same on SQS_NODES nodes
# with nu. SQS_DURATION is each run's measured time; SQS_CLIENTS and
# SQS_CLUSTER_CLIENTS the sweeps; SQS_ARGS passes more flags.
SQS_DURATION ?= 20s
SQS_CLIENTS ?= 5,10,25,50,100
SQS_NODES ?= 4
SQS_CLUSTER_CLIENTS ?= 20,100,400
SQS_ARGS ?=
bench-sqs: build ## session throughput with --admission none, page, sqs from below saturation to 4x it, 1 node then SQS_NODES with nu (~10 min at SQS_DURATION=20s)
	@mkdir -p results/sqs
	$(BIN)/loadgen sessions --local 1 --admission none,page,sqs --clients $(SQS_CLIENTS) \
		--duration $(SQS_DURATION) --warmup 5s --cooldown 2s --plot results/sqs/sessions-1.png $(SQS_ARGS)
	@if [ "$(SQS_NODES)" -gt 1 ]; then \
		$(BIN)/loadgen sessions --local $(SQS_NODES) --admission none,page,sqs --clients $(SQS_CLUSTER_CLIENTS) \
			--duration $(SQS_DURATION) --warmup 5s --cooldown 2s --plot results/sqs/sessions-$(SQS_NODES).png $(SQS_ARGS); fi

demo: build ## start an 8-node loopback cluster, compare policies and HAProxy's central queue on the burst workload, print the table (CSV and plots in results/demo)
	@bash scripts/ensure-haproxy.sh >/dev/null 2>&1 || true
	$(BIN)/loadgen compare --local 8 --workload burst --scale 0.5 --rates 200,280,320,360 \
		--warmup 2s --duration 6s --cooldown 1s --settle 500ms --policies rr,ct,ll,nu,nu-exact,steal,cq --peers haproxy-cq \
		--limit-from nu@280 --progress lines --out results/demo

clean: ## remove build outputs
	rm -rf $(BIN) results

# ---- Containers: image, Compose cluster, Docker end-to-end test, Kubernetes manifests (deploy/) ----
.PHONY: image compose-up compose-load compose-nodes compose-down e2e-docker k8s-check

SWD_IMAGE ?= swd:dev
COMPOSE_FILE_SWD := deploy/docker-compose.yml
COMPOSE_PROJECT ?= swd
# `docker compose` (v2 plugin) if the docker CLI has it, else docker-compose (v1).
COMPOSE ?= $(shell docker compose version >/dev/null 2>&1 && echo "docker compose" || echo docker-compose)
COMPOSE_CMD = SWD_IMAGE=$(SWD_IMAGE) $(COMPOSE) -p $(COMPOSE_PROJECT) -f $(COMPOSE_FILE_SWD)
COMPOSE_TOKEN = $${SWD_CONTROL_TOKEN:-swd-dev-token-not-a-secret}

image: build ## docker image SWD_IMAGE (swd:dev): the four static binaries FROM scratch (deploy/Dockerfile)
	docker build -f deploy/Dockerfile --build-arg VERSION=$(VERSION) -t $(SWD_IMAGE) $(BIN)
	@docker image inspect $(SWD_IMAGE) --format '$(SWD_IMAGE): {{.Size}} bytes, user {{.Config.User}}'

compose-up: image ## start the 4-node Compose cluster + dispatcher and wait until every member sees the others
	$(COMPOSE_CMD) up -d
	@addr=$$($(COMPOSE_CMD) port app-0 7070); \
	for i in $$(seq 120); do \
	  n=$$($(BIN)/swdctl --addr "$$addr" --token "$(COMPOSE_TOKEN)" nodes 2>/dev/null | grep -c ' alive '); \
	  if [ "$${n:-0}" -ge 5 ]; then $(BIN)/swdctl --addr "$$addr" --token "$(COMPOSE_TOKEN)" nodes; exit 0; fi; \
	  sleep 0.5; \
	done; \
	echo "cluster not ready after 60s (members alive: $${n:-0}); see: $(COMPOSE_CMD) logs"; exit 1

compose-load: ## run the loadgen service (standard workload, SWD_LOAD_RATE=40/s for SWD_LOAD_DURATION=30s)
	$(COMPOSE_CMD) --profile load run --rm loadgen

compose-nodes: ## print the Compose cluster's members as node-0 sees them (swdctl nodes via the published control port)
	@$(BIN)/swdctl --addr "$$($(COMPOSE_CMD) port app-0 7070)" --token "$(COMPOSE_TOKEN)" nodes

compose-down: ## stop the Compose cluster and remove its containers, network and volumes
	$(COMPOSE_CMD) --profile load down --volumes --remove-orphans --timeout 20

e2e-docker: build ## end-to-end test on Docker: Compose cluster under load, kill a node, cut one off, heal (test/docker)
	$(GO) test -count=1 -v -timeout 10m ./test/docker/

k8s-check: ## validate deploy/k8s against the Kubernetes API types, no cluster needed (test/k8s)
	$(GO) test -count=1 -v ./test/k8s/

# Observability (issue 8): test dependencies, tests and the UI screenshot.
.PHONY: test-deps test-observability ui-screenshot

test-deps: ## install Debian's prometheus, chromium, haproxy, nginx and caddy where missing (root only; the tests that need them skip otherwise)
	bash scripts/ensure-prometheus.sh
	bash scripts/ensure-chromium.sh
	bash scripts/ensure-haproxy.sh
	bash scripts/ensure-nginx.sh
	bash scripts/ensure-caddy.sh

test-observability: build ## metrics golden list, dashboard, scrape configs; Prometheus and Chromium end-to-end (test/observability)
	$(GO) test -race -count=1 -timeout 5m ./internal/metrics/ ./test/observability/

ui-screenshot: build ## refresh docs/img/ui.png: headless Chromium on a 4-node cluster's /ui under load
	UPDATE_SCREENSHOT=1 $(GO) test -count=1 -run 'TestStatusPageInChromium$$' ./test/observability/

# ---- Security (issue 11): mTLS, membership, HTTP limits, smuggling; vulnerability check ----
.PHONY: test-security vulncheck

# GOVULNDB, if set, is the vulnerability database govulncheck reads (`make lint`,
# `make vulncheck`), e.g. file:///srv/govulndb for a local copy where the public
# database cannot be reached; empty means govulncheck's default.
GOVULNDB ?=

test-security: build ## security tests: mTLS, forged transfers, HTTP limits and smuggling (test/security), certificates (internal/tlsutil)
	$(GO) test -race -count=1 -timeout 5m ./test/security/ ./internal/tlsutil/

vulncheck: tools ## govulncheck alone: known vulnerabilities in the dependencies that the code reaches (GOVULNDB=file:///copy offline)
	$(TOOLS)/govulncheck $(if $(GOVULNDB),-db $(GOVULNDB)) ./...
