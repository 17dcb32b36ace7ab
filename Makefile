# SPACE — make targets. Newcomers need two: `make run` and `make test`.
# Everything runs as root on Debian 12 (see README.md).

GO        ?= $(shell command -v go 2>/dev/null || echo /usr/local/go/bin/go)
LISTEN    ?= 127.0.0.1:8080
DATA_DIR  ?= /var/lib/space
# -p 2: VM tests boot QEMU under TCG; more parallel packages starve 2 cores.
TEST_P    ?= 2
TEST_FLAGS ?=
BENCH     ?= .
# Packages run again under the race detector in `make test`: the ones that
# start goroutines (operations, streams, the agent link, pools, the egress
# proxy, the jail). The VMM driver's own suite is left to the plain run.
RACE_PKGS ?= ./internal/api/... ./internal/operation/ ./internal/agent/ ./internal/agentclient/ \
	./internal/agentproto/ ./internal/store/... ./internal/auth/ ./internal/secrets/ ./internal/network/ \
	./internal/server/ ./internal/egress/ ./internal/jail/ ./internal/worker/... ./internal/objstore/
# make fuzz: how long each fuzz target runs (make test runs each for 3s).
FUZZTIME  ?= 60s

export PATH := /usr/local/go/bin:$(PATH)

.PHONY: all setup setup-test build run test vet bench fuzz clean images kube s3

all: build

## setup: install what the server needs (host packages, Go, the guest kernel; idempotent)
setup:
	bash scripts/setup.sh

## setup-test: setup plus the test tools (PostgreSQL and etcd binaries with their
## services disabled, kubectl, pip, mypy, Node >= 20.18.1, the e2e npm clients)
setup-test:
	bash scripts/setup.sh --test

# What `space version`, `spaced --version` and GET /v1/version say:
# the nearest tag (or the commit) and the commit, set at link time.
VERSION   ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
COMMIT    ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
VERSION_LDFLAGS = -X github.com/space-sandbox/space/internal/version.Version=$(VERSION) \
	-X github.com/space-sandbox/space/internal/version.Commit=$(COMMIT)

## build: bin/spaced, bin/space and the static guest agent bin/space-agent
build:
	@mkdir -p bin
	$(GO) build -ldflags='$(VERSION_LDFLAGS)' -o bin/spaced ./cmd/spaced
	$(GO) build -ldflags='$(VERSION_LDFLAGS)' -o bin/space ./cmd/space
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags='-s -w' -o bin/space-agent ./cmd/space-agent

## run: set up, build and start the single-node server (API on $(LISTEN))
run: setup build
	./bin/spaced --listen $(LISTEN) --data-dir $(DATA_DIR)

vet:
	$(GO) vet ./...

## kube: build the Kubernetes control plane binary the cluster tests run
## (test/kube; once per machine, cached in /var/cache/space/kube)
kube:
	GO=$(GO) bash scripts/kube-build.sh

## test: set up, build, vet and run every test (CI runs this)
## (again under -race for RACE_PKGS, the fuzz targets briefly, then the leak check:
## no VMM, mount, loop device or netns the tests made may remain)
test: setup-test build vet kube s3
	@bash scripts/leakcheck.sh --baseline .leak-baseline
	$(GO) test -p $(TEST_P) -count=1 -timeout 25m $(TEST_FLAGS) ./...
	$(GO) test -race -p $(TEST_P) -count=1 -timeout 20m $(TEST_FLAGS) $(RACE_PKGS)
	GO=$(GO) bash scripts/fuzz.sh 3s
	@bash scripts/leakcheck.sh .leak-baseline

## s3: build SeaweedFS's weed, the S3 object store the objstore tests run,
## from the Go module proxy (cached under /var/cache/space/s3; a no-op once built)
s3:
	@GO=$(GO) bash scripts/s3-build.sh

## bench: run the Go benchmarks (no tests)
bench: setup-test build s3
	$(GO) test -p 1 -count=1 -run '^$$' -bench '$(BENCH)' -benchmem -timeout 30m ./...

## fuzz: run every fuzz target for $(FUZZTIME) each (seed corpora in testdata/fuzz/)
fuzz:
	GO=$(GO) bash scripts/fuzz.sh $(FUZZTIME)

## generate: lint proto/ and regenerate the worker protocol's Go code (internal/workerpb)
## with buf and its plugins, each built from the Go module proxy at a pinned version
BUF_VERSION ?= v1.75.0
.PHONY: generate
generate:
	cd proto && $(GO) run github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION) lint
	cd proto && $(GO) run github.com/bufbuild/buf/cmd/buf@$(BUF_VERSION) generate

## images: container images of the control plane and the worker, built
## without a container daemon (mmdebstrap roots cached in /var/cache/space/images),
## as archives in bin/images for kind load / ctr import / crane push; prints digests
images: setup
	$(GO) run ./deploy/images -o bin/images

clean:
	rm -rf bin

## cluster: SPACE's cluster mode on this machine: Kubernetes (etcd + control
## plane), PostgreSQL, SeaweedFS, two `spaced control` replicas
## (127.0.0.1:8080, :8081) and three `spaced worker` nodes; state, PIDs and
## how to use it in $(CLUSTER_DIR)/cluster.json (README: Running a cluster)
CLUSTER_DIR ?= /var/lib/space-cluster
.PHONY: cluster cluster-down
cluster: setup-test build kube s3
	$(GO) build -o bin/space-cluster ./cmd/space-cluster
	./bin/space-cluster up --dir $(CLUSTER_DIR) --spaced bin/spaced

## cluster-down: stop what `make cluster` started (by PID) and remove what it
## made (VMs, network namespaces, mounts, loop devices, data dirs)
cluster-down:
	$(GO) build -o bin/space-cluster ./cmd/space-cluster
	./bin/space-cluster down --dir $(CLUSTER_DIR)
