# SWD build, test and measurement targets. `make help` lists them.
SHELL := /bin/bash
GO ?= go
BIN := bin
TOOLS := $(CURDIR)/.tools
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/swd-project/swd/internal/node.Version=$(VERSION)
STATICCHECK_VERSION := 2026.1.2
STATICCHECK_MOD := honnef.co/go/tools/cmd/staticcheck@v0.8.2
GOVULNCHECK_MOD := golang.org/x/vuln/cmd/govulncheck@v1.9.0
PROTOC_GEN_GO := google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
PROTOC_GEN_GO_GRPC := google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.0
TEST_TIMEOUT ?= 25m
FUZZTIME ?= 30s

.PHONY: help build test test-short lint bench demo proto fuzz clean tools chaos

help: ## list targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

build: ## build swd, swdctl, dummyapp, loadgen into bin/ (static)
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

test: build ## run every test with the race detector (end-to-end tests use bin/)
	$(GO) test -race -timeout $(TEST_TIMEOUT) ./...

test-short: build ## quick test run without the race detector
	$(GO) test -short -timeout 10m ./...

tools: ## install lint tools into .tools/
	@mkdir -p $(TOOLS)
	@test -x $(TOOLS)/staticcheck || GOBIN=$(TOOLS) $(GO) install $(STATICCHECK_MOD)
	@test -x $(TOOLS)/govulncheck || GOBIN=$(TOOLS) $(GO) install $(GOVULNCHECK_MOD)

lint: tools ## go vet, gofmt check, staticcheck, govulncheck
	$(GO) vet ./...
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(TOOLS)/staticcheck ./...
	$(TOOLS)/govulncheck ./...

bench: build ## print performance figures: micro-benchmarks and the proxy overhead
	$(GO) test -run '^$$' -bench . -benchmem ./internal/queue/ ./internal/policy/
	$(GO) run ./test/benchproxy

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

demo: build ## start a local cluster, compare policies, print the table (results/ gets CSV and plots)
	$(BIN)/loadgen compare --local 8 --workload burst --scale 0.25 --rates 40,80,120,160,200 \
		--duration 20s --warmup 3s --policies rr,ct,ll,nu,nu-exact --out results/demo

clean: ## remove build outputs
	rm -rf $(BIN) results
