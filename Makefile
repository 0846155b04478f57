# trustsync — build, test and benchmark.
#
#   make demo          trustsync's whole loop on a real one-node cluster, narrated (root)
#   make test          everything: unit tests (with fuzz seed corpora) and e2e tests
#                      against a real kube-apiserver and a real node (kubelet,
#                      containerd), building both first
#   make build [FIPS=1]
#                      the binaries into bin/ (five components and kubectl-trustsync),
#                      stamped with the build's version (hack/version.sh), which
#                      charts/trustsync/files/build-version gives the chart's default tag;
#                      and trustsync-signer-pkcs11: the signer with cgo, for PKCS#11;
#                      FIPS=1: with Go's FIPS 140-3 module
#   make controlplane  etcd, kube-apiserver, kube-controller-manager, kubectl, helm
#   make test-tools    what only the tests use: promtool, cosign, spire-server, krew,
#                      local-kms, SoftHSM2 (Debian's)
#   make node          kubelet, kube-scheduler, containerd, runc, CNI plugins (as root)
#   make lint          gofmt, go vet, staticcheck
#   make generate      the chart's README, docs/install.md's values table and the
#                      schema's descriptions, from values.yaml's comments
#   make bench         benchmarks
#   make bench-node    the three deliveries side by side (the kubelet's native
#                      projection, trustsync's sidecar and node agent), pod certificates
#                      in a burst, a bundle edit to the app's reload, on the real node
#                      (root; about 10 minutes)
#   make fuzz          run the fuzz targets for FUZZTIME each (default 1m)
#   make image [GOARCH=arm64] [IMAGE=ref] [FIPS=1]
#                      the container images as tarballs in _output/, without a daemon:
#                      Linux binaries for GOARCH (default: this host's), tagged IMAGE
#                      (default: the chart's own image reference; with FIPS=1, its
#                      tag and -fips, the binaries built with Go's FIPS 140-3 module),
#                      and the PKCS#11 signer's (cgo, on a glibc base from Debian's
#                      packages), tagged REPOSITORY-signer-pkcs11:TAG
#   make release       dist/: the chart package, every CRD in one file, the image
#                      (linux/amd64 and arm64) as an OCI layout tarball, the plugin's
#                      archives and krew manifest, SBOMs, SHA256SUMS; reproducible
#   make push REGISTRY=host[:port]/path
#                      the release's images and chart (OCI) to a registry, making the
#                      release first unless dist/ is one of this tree
#   make test-upgrade [FROM=commit]
#                      on the real node, upgrade the release of commit FROM (default: the
#                      first commit CHANGELOG.md names) with live pods to the tree (root)

GO        ?= go
BIN       := $(CURDIR)/bin
IMAGE_BINARIES := trustsync-webhook trustsync-sidecar trustsync-signer trustsync-controller trustsync-agent kubectl-trustsync
BINARIES  := $(IMAGE_BINARIES)
# Every package but the e2e suites, which need the control plane.
UNIT_PKGS  = $(shell $(GO) list ./... | grep -v /test/e2e)
FUZZTIME  ?= 1m
BENCHTIME ?= 1s

# The build's version, stamped into every binary, the image tag and the chart's
# default tag: VERSION at a release, else what git describe would add to it
# (hack/version.sh: 0.1.0-dev.42.gabc1234, .dirty-HASH for a changed tree), so each
# rebuild of a changed tree rolls out under helm upgrade.
VERSION   := $(shell hack/version.sh)
# Where build and image write it for the chart in the tree (not in a release's chart).
BUILD_VERSION_FILE := charts/trustsync/files/build-version
LDFLAGS   := -s -w -X github.com/trustsync/trustsync/buildinfo.Version=$(VERSION)
IMAGE ?= ghcr.io/trustsync/trustsync:v$(VERSION)$(if $(filter 1,$(FIPS)),-fips)

# FIPS=1 builds every binary with Go's CMVP-validated FIPS 140-3 module (v1.0.0): they
# then run in FIPS mode by default (GODEBUG=fips140=on) and say so in --version and
# trustsync_build_info.
ifeq ($(FIPS),1)
export GOFIPS140 := v1.0.0
endif

.PHONY: softhsm generate release push test-upgrade image all build demo test test-unit test-e2e controlplane test-tools node lint bench bench-node fuzz clean help

all: build

help:
	@sed -n 's/^#   //p' Makefile

build:
	@mkdir -p $(BIN)
	@echo $(VERSION) > $(BUILD_VERSION_FILE)
	@for b in $(BINARIES); do \
		CGO_ENABLED=0 $(GO) build -trimpath -ldflags="$(LDFLAGS)" -o $(BIN)/$$b ./cmd/$${b#trustsync-} || exit 1; \
	done
	CGO_ENABLED=1 $(GO) build -trimpath -ldflags="$(LDFLAGS)" -o $(BIN)/trustsync-signer-pkcs11 ./cmd/signer

demo:
	@hack/demo.sh

test: test-unit test-e2e

# -race needs cgo; the race detector is cheap on unit tests and catches what the
# informer- and watch-driven code gets wrong.
# The keeper's unit tests run against a real token (SoftHSM2) and a local KMS. The
# packages that do cryptography run again in strict FIPS 140-3 mode, where a
# non-approved algorithm fails: what FIPS mode cannot do is refused where a user asks
# for it, never a panic at run time.
FIPS_PKGS = ./bundle/... ./api/... ./keyuri ./buildinfo ./signer/... ./webhook/... ./controller/federation ./delivery/certificate ./trustreport/...
test-unit: test-tools
	$(GO) test -race -count=1 $(UNIT_PKGS)
	GODEBUG=fips140=only $(GO) test -count=1 $(FIPS_PKGS)
	cd hack/tools/image && $(GO) test -count=1 ./...

# One e2e package at a time: each runs its own kube-apiserver and etcd (test/e2e/node a
# whole node, through hack/cluster.sh), and the machine may have only 2 cores.
test-e2e: controlplane test-tools node build
	$(GO) test -count=1 -p 1 -timeout 60m ./test/e2e/...

controlplane:
	@hack/controlplane.sh

test-tools: softhsm
	@hack/controlplane.sh test-tools

softhsm:
	@hack/softhsm.sh

node:
	@hack/node.sh

$(BIN)/staticcheck: hack/tools/lint/go.mod hack/tools/lint/go.sum
	@mkdir -p $(BIN)
	cd hack/tools/lint && $(GO) build -o $(BIN)/staticcheck honnef.co/go/tools/cmd/staticcheck

lint: $(BIN)/staticcheck
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt wants to change:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(BIN)/staticcheck ./...

# The sidecar benchmarks run against a real kube-apiserver: each Propagation
# iteration is one bundle update reaching every sidecar.
bench: controlplane
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) -count=5 ./bundle/... ./webhook/...
	$(GO) test -run='^$$' -bench=Propagation -benchtime=5x -timeout 30m ./test/e2e/sidecar/
	$(GO) test -run='^$$' -bench=IdleRSS -benchtime=1x -count=5 ./test/e2e/sidecar/
	$(GO) test -run='^$$' -bench=Signing -benchtime=1x -count=2 -timeout 30m ./test/e2e/signer/
	$(GO) test -run='^$$' -bench=CertificateStartup -benchtime=7x ./test/e2e/signer/
	$(GO) test -run='^$$' -bench=LargeReviews -benchtime=1x -count=2 ./test/e2e/webhook/
	$(GO) test -run='^$$' -bench=ManyPipelines -benchtime=5x -count=3 ./test/e2e/sidecar/
	$(GO) test -run='^$$' -bench=Agent_1000Volumes -benchtime=5x ./test/e2e/agent/
	$(GO) test -run='^$$' -bench=Reports_1000Nodes -benchtime=3x -timeout 40m ./test/e2e/agent/
	$(GO) test -run='^$$' -bench=Targets_1000Namespaces20Targets -benchtime=3x -timeout 50m ./test/e2e/controller/
	$(GO) test -run='^$$' -bench=RotationGate_10000Pods1000Nodes -benchtime=1x -count=3 -timeout 60m ./test/e2e/signer/
	$(GO) test -run='^$$' -bench=SignerMemory_10000Pods1000Nodes -benchtime=1x -count=3 -timeout 60m ./test/e2e/signer/

# Each native edit waits for the kubelet's periodic sync (about a minute): 5 edits, after
# the discarded first run testing makes.
bench-node: controlplane node build
	$(GO) test -run='^$$' -bench='NativeVsTrustsync' -benchtime=5x -timeout 40m ./test/e2e/node/
	$(GO) test -run='^$$' -bench='PodCertificates_Burst|Reload_BundleEditToApp' -benchtime=3x -timeout 40m ./test/e2e/node/

# Every fuzz target, one after another (go test fuzzes one target at a time).
fuzz:
	$(GO) test -run='^$$' -fuzz='^FuzzValidateTrustBundle$$' -fuzztime=$(FUZZTIME) ./bundle/
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeCertificates$$' -fuzztime=$(FUZZTIME) ./bundle/
	$(GO) test -run='^$$' -fuzz='^FuzzDecodeEdited$$' -fuzztime=$(FUZZTIME) ./bundle/
	$(GO) test -run='^$$' -fuzz='^FuzzInject$$' -fuzztime=$(FUZZTIME) ./injector/
	$(GO) test -run='^$$' -fuzz='^FuzzDecodePod$$' -fuzztime=$(FUZZTIME) ./injector/
	$(GO) test -run='^$$' -fuzz='^FuzzAdmissionReview$$' -fuzztime=$(FUZZTIME) ./webhook/
	$(GO) test -run='^$$' -fuzz='^FuzzIssuePCR$$' -fuzztime=$(FUZZTIME) ./signer/

# One image holds the five binaries. The Dockerfile builds it where a container engine
# runs; this writes the same content as a tarball (`ctr images import`, `docker load`,
# `kind load image-archive`) with a Go tool, no daemon. hack/tools/image's test checks
# the two agree. The binaries are Linux's whatever the host (a Mac builds a Linux
# image), for GOARCH, and the image is stamped with the architecture they are built
# for; the tool itself runs on the host (GOOS and GOARCH emptied for it).
GOARCH ?= $(shell $(GO) env GOARCH)
image:
	@echo $(VERSION) > $(BUILD_VERSION_FILE)
	@GOARCH=$(GOARCH) IMAGE=$(IMAGE) LDFLAGS="$(LDFLAGS)" hack/image.sh

generate:
	$(GO) run ./hack/chartdoc

release:
	@hack/release.sh

test-upgrade: controlplane node build
	TRUSTSYNC_UPGRADE_FROM=$(FROM) $(GO) test -count=1 -v -timeout 40m -run TestUpgrade ./test/e2e/upgrade/

# Only helm and the image tool: no control plane.
push:
	@test -n "$(REGISTRY)" || { echo "give REGISTRY=host[:port]/path, e.g. make push REGISTRY=ghcr.io/trustsync" >&2; exit 1; }
	@hack/controlplane.sh helm
	@hack/push.sh $(REGISTRY)

clean:
	rm -rf $(BIN)
