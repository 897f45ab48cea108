# kcp dependency-controller

# Binaries built from this repository and the pinned tools all live in bin/.
LOCALBIN ?= $(CURDIR)/bin

# The version of the project: the images' tag and OCI version label, and the
# chart's version and appVersion in `make chart-package`.
VERSION ?= $(shell cat $(CURDIR)/VERSION)

# Pinned tool versions. Each tool is built from its Go module into bin/ once
# and reused while the pinned version stays the same.
CONTROLLER_TOOLS_VERSION ?= v0.20.1
KUSTOMIZE_VERSION ?= v5.8.1
GINKGO_VERSION ?= $(shell go list -m -f '{{.Version}}' github.com/onsi/ginkgo/v2)
GOLANGCI_LINT_VERSION ?= v2.11.4
HELM_VERSION ?= $(shell awk '$$1 == "require" && $$2 == "helm.sh/helm/v3" { print $$3; exit } $$1 == "helm.sh/helm/v3" { print $$2; exit }' $(CURDIR)/hack/tools/helm/go.mod)

CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
KUSTOMIZE ?= $(LOCALBIN)/kustomize-$(KUSTOMIZE_VERSION)
GINKGO ?= $(LOCALBIN)/ginkgo-$(GINKGO_VERSION)
GOLANGCI_LINT ?= $(LOCALBIN)/golangci-lint-$(GOLANGCI_LINT_VERSION)
# Helm, pinned in hack/tools/helm.
HELM ?= $(LOCALBIN)/helm-$(HELM_VERSION)
# Validates manifests against the OpenAPI schemas of the pinned Kubernetes
# release, built from hack/tools/validate-manifests.
VALIDATE_MANIFESTS ?= $(LOCALBIN)/validate-manifests
# kcp, kcp-front-proxy, cache-server, sharded-test-server, apigen and kubectl,
# built by hack/build-kcp.sh from the tools module in hack/tools/kcp.
KCP ?= $(LOCALBIN)/kcp
APIGEN ?= $(LOCALBIN)/apigen
KUBECTL ?= $(LOCALBIN)/kubectl

# Every suite that starts kcp (envtest, the kcp contract suite, e2e, measure,
# soak, run-local) takes kcp, kcp-front-proxy, cache-server and
# sharded-test-server from KCP_BIN_DIR: the pinned build in bin/ by default,
# or a directory with another kcp build (see docs/operations.md,
# Compatibility).
export KCP_BIN_DIR ?= $(LOCALBIN)
# kcp needs ~25s to become ready on an idle machine; leave room for a busy one.
export TEST_KCP_START_TIMEOUT ?= 3m

# The images, as the chart's values refer to them by default.
IMG_REGISTRY ?= ghcr.io/opendefensecloud
CONTROLLER_IMG ?= $(IMG_REGISTRY)/dependency-controller:$(VERSION)
WEBHOOK_IMG ?= $(IMG_REGISTRY)/dependency-webhook:$(VERSION)
# OCI labels of the images (org.opencontainers.image.source and .revision).
IMAGE_SOURCE ?= https://github.com/opendefensecloud/dependency-controller
GIT_REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)

# The Helm chart and where `make chart-package` puts the packaged chart.
CHART_DIR ?= deploy/charts/dependency-controller
DIST ?= $(CURDIR)/dist

GO_TEST_FLAGS ?= -race
# Envtest suites start kcp and create workspaces; give them room on slow CI.
GO_TEST_TIMEOUT ?= 20m

.PHONY: all
all: build

##@ General

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*##"; printf "Usage:\n  make \033[36m<target>\033[0m\n"} /^[a-zA-Z_0-9-]+:.*?##/ { printf "  \033[36m%-18s\033[0m %s\n", $$1, $$2 } /^##@/ { printf "\n\033[1m%s\033[0m\n", substr($$0, 5) } ' $(MAKEFILE_LIST)

##@ Run locally

.PHONY: run-local
run-local: build kcp kustomize ## Start a local kcp (state in .kcp/), deploy, create a demo topology, run controller and webhook; Ctrl-C stops everything.
	@go build -o $(LOCALBIN)/localdev ./hack/localdev
	@$(LOCALBIN)/localdev run

.PHONY: demo
demo: build kcp kustomize ## Scripted walkthrough on a fresh local kcp; fails on any unexpected answer, cleans up after itself.
	@go build -o $(LOCALBIN)/localdev ./hack/localdev
	@$(LOCALBIN)/localdev demo

##@ Development

.PHONY: manifests
manifests: controller-gen apigen ## Generate the CRD and RBAC roles (config/crd, config/rbac/*) and the kcp APIResourceSchema and APIExport (config/kcp).
	$(CONTROLLER_GEN) crd paths="./api/..." output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=dependency-controller paths="./internal/controller/..." \
		output:rbac:artifacts:config=config/rbac/controller
	$(CONTROLLER_GEN) rbac:roleName=dependency-webhook paths="./internal/rulesync/...;./internal/replay/..." \
		output:rbac:artifacts:config=config/rbac/webhook
	hack/apigen.sh $(APIGEN) config/crd/bases config/kcp

.PHONY: generate
generate: controller-gen ## Generate deepcopy code (zz_generated.deepcopy.go) and apply configurations (api/v1alpha1/applyconfiguration) for server-side apply.
	$(CONTROLLER_GEN) object applyconfiguration paths="./api/..."

.PHONY: fmt
fmt: ## Run gofmt on the code.
	gofmt -s -w $$(git ls-files '*.go')

.PHONY: vet
vet: ## Run go vet on every module.
	go vet ./...
	cd staging/multicluster-provider-client && go vet ./...
	cd hack/tools/validate-manifests && go vet ./...

.PHONY: lint
lint: golangci-lint ## Run golangci-lint.
	$(GOLANGCI_LINT) run ./...

.PHONY: verify
verify: generate manifests ## Fail if generated files are stale, build output is tracked, code is not gofmt'ed, go.mod is untidy, or vet/lint complain.
	@hack/verify-tracked-files.sh
	@hack/verify-clean.sh 'generated files (run "make generate manifests")' api config
	@test -z "$$(gofmt -s -l $$(git ls-files '*.go'))" || { echo "gofmt -s needed on:"; gofmt -s -l $$(git ls-files '*.go'); exit 1; }
	go mod tidy
	cd staging/multicluster-provider-client && go mod tidy
	cd hack/tools/kcp && go mod tidy
	cd hack/tools/helm && go mod tidy
	cd hack/tools/validate-manifests && go mod tidy
	@# '*go.mod' and '*go.sum' match the files of every module, hack/tools/* included.
	@hack/verify-clean.sh 'go.mod/go.sum (run "go mod tidy" in each module)' '*go.mod' '*go.sum'
	$(MAKE) vet lint

##@ Test

.PHONY: test
test: kcp helm validate-manifests ## Run unit tests (the chart's with bin/helm) and the envtest suites against a real kcp built from source.
	@echo "kcp for the suites: $$($(KCP_BIN_DIR)/kcp --version) from $(KCP_BIN_DIR)"
	go test $(GO_TEST_FLAGS) -timeout $(GO_TEST_TIMEOUT) ./...
	cd staging/multicluster-provider-client && go test ./...

# E2E_SHARD_CONFIG selects the kcp topology of the e2e suite: single-shard,
# multi-shard, or both (default).
E2E_SHARD_CONFIG ?= single-shard multi-shard
# Logs and kcp state of the e2e runs.
export E2E_ARTIFACTS ?= $(CURDIR)/.e2e

# The commit whose binaries the e2e upgrade scenario starts from: the last
# release before this one.
PREVIOUS_REF ?= $(shell cat $(CURDIR)/test/e2e/PREVIOUS_REF)

.PHONY: previous
previous: ## Build the controller and the webhook of PREVIOUS_REF into bin/previous/ (the e2e suite upgrades from them).
	@hack/build-previous.sh $(PREVIOUS_REF) $(LOCALBIN)/previous

.PHONY: test-contract
test-contract: ## Run the kcp contract suite (part of make test) against the kcp in KCP_BIN_DIR (default: the pinned build in bin/), verbosely.
	@test -x "$(KCP_BIN_DIR)/kcp" || { echo "no kcp in $(KCP_BIN_DIR): run make kcp, or set KCP_BIN_DIR to a directory with your kcp build"; exit 1; }
	go test -count=1 -timeout 20m -v ./test/kcpcontract/

.PHONY: test-e2e
test-e2e: build kcp ginkgo helm previous ## Run the e2e suite: both binaries as processes with the arguments the Helm chart renders, against kcp (E2E_SHARD_CONFIG=single-shard|multi-shard, default both).
	@set -e; for cfg in $(E2E_SHARD_CONFIG); do \
		echo "=== e2e on $$cfg kcp (logs in $(E2E_ARTIFACTS)/$$cfg)"; \
		start=$$(date +%s); \
		E2E_SHARD_CONFIG=$$cfg $(GINKGO) -v --no-color --tags e2e --timeout 30m ./test/e2e/ || { \
			echo "=== e2e on $$cfg kcp failed; the failures in brief:"; cat "$(E2E_ARTIFACTS)/$$cfg/failures.txt" 2>/dev/null; exit 1; }; \
		echo "=== e2e on $$cfg kcp passed in $$(( $$(date +%s) - start ))s"; \
	done

# Every fuzz target, as package:Target. Inputs that fail are written to the
# package's testdata/fuzz/<Target>/ by go test; commit them, and they run as
# regression cases in `make test` from then on.
FUZZ_TARGETS ?= ./internal/fieldpath/:FuzzParse ./internal/fieldpath/:FuzzResolveJSON \
	./internal/vw/:FuzzStreamList ./internal/index/store/:FuzzDecodeObject ./internal/webhook/deletion/:FuzzAdmissionHandler \
	./internal/records/:FuzzVerify ./internal/inflight/:FuzzParse
FUZZTIME ?= 30s

.PHONY: fuzz
fuzz: ## Run each fuzz target for FUZZTIME (default 30s) on top of its corpus (hack/fuzz.sh: a run that Go's coordinator ends with a bare deadline error, golang/go#75804, is repeated once).
	@hack/fuzz.sh $(FUZZTIME) $(FUZZ_TARGETS)

.PHONY: measure
measure: build kcp ## Measure on a real kcp: single DELETEs (1,000 and 10,000 dependents), dependent CREATEs and UPDATEs, a CREATE and a DELETE sent together (500 rounds, and 500 under the webhook's lease), 10,000 references to one object, bulk deletions (500 to 2,000; old objects: 1,000 and 2,000), a 3-level stack deleted under Replay rules (1,000 per level), protected-object UPDATEs, the webhook's memory; prints tables (MEASURE_ONLY=single,create,update,race,hot,bulk,stack).
	go test -tags perf -count=1 -timeout 60m -v -run TestMeasure ./test/perf/

# How long `make soak` churns, in minutes.
SOAK_MINUTES ?= 10
export SOAK_MINUTES

.PHONY: soak
soak: build kcp ## Soak on a real kcp: two tenants churn for SOAK_MINUTES (default 10) while the rules change every SOAK_RULE_SECONDS (120); samples RSS, goroutines, index size and DELETE latency every SOAK_SAMPLE_SECONDS (30); fails on a wrong decision or growth after warm-up (SOAK_WORKERS, SOAK_BASE, SOAK_OUTPUT).
	go test -tags soak -count=1 -timeout $$(( $(SOAK_MINUTES) + 30 ))m -v -run TestSoak ./test/soak/

.PHONY: bench
bench: ## Run the Go benchmarks of the DELETE hot path (field paths, list decoding, index, validator) and of the audit of dangling references.
	go test -run='^$$' -bench=. -benchmem ./internal/fieldpath/ ./internal/vw/ ./internal/index/... ./internal/webhook/deletion/ ./internal/audit/

##@ Build

.PHONY: build
build: $(LOCALBIN) ## Build the project's binaries (bin/controller, bin/webhook, the kubectl plugin bin/kubectl-dependencies); kcp is built by `make kcp`.
	go build -o $(LOCALBIN)/ ./cmd/...

##@ Deployment

DEPCTRL_WORKSPACE ?= root:dep-ctrl
export DEPCTRL_WORKSPACE

.PHONY: deploy
deploy: kubectl kustomize ## Apply the APIExport and RBAC into DEPCTRL_WORKSPACE (default root:dep-ctrl, created if missing) of the kcp in KUBECONFIG.
	KUBECTL=$(KUBECTL) KUSTOMIZE=$(KUSTOMIZE) hack/deploy.sh deploy

.PHONY: undeploy
undeploy: kubectl kustomize ## Remove what deploy applied (the workspace is kept).
	KUBECTL=$(KUBECTL) KUSTOMIZE=$(KUSTOMIZE) hack/deploy.sh undeploy

DOCKER_BUILD_ARGS ?= --build-arg VERSION=$(VERSION) --build-arg REVISION=$(GIT_REVISION) --build-arg SOURCE=$(IMAGE_SOURCE)

.PHONY: docker-build
docker-build: ## Build the controller and webhook images, tagged VERSION, with OCI labels (needs a Docker engine).
	docker build $(DOCKER_BUILD_ARGS) --target controller -t $(CONTROLLER_IMG) .
	docker build $(DOCKER_BUILD_ARGS) --target webhook -t $(WEBHOOK_IMG) .

.PHONY: docker-push
docker-push: ## Push the images that docker-build built (IMG_REGISTRY names the registry).
	docker push $(CONTROLLER_IMG)
	docker push $(WEBHOOK_IMG)

.PHONY: chart-package
chart-package: helm ## Package the Helm chart into dist/, with version and appVersion VERSION.
	@mkdir -p $(DIST)
	$(HELM) lint --strict $(CHART_DIR)
	$(HELM) package $(CHART_DIR) --version $(VERSION) --app-version $(VERSION) --destination $(DIST)

##@ Tools

$(LOCALBIN):
	mkdir -p $(LOCALBIN)

.PHONY: kubectl
kubectl: $(LOCALBIN) ## Build kubectl (matching the pinned kcp) into bin/.
	@hack/build-kcp.sh $(LOCALBIN) kubectl

.PHONY: kcp
kcp: $(LOCALBIN) ## Build kcp, kcp-front-proxy, cache-server, sharded-test-server, apigen and kubectl (pinned in hack/tools/kcp) into bin/.
	@hack/build-kcp.sh $(LOCALBIN)

.PHONY: apigen
apigen: $(LOCALBIN) ## Build apigen (pinned in hack/tools/kcp) into bin/.
	@hack/build-kcp.sh $(LOCALBIN) apigen

.PHONY: controller-gen
controller-gen: $(CONTROLLER_GEN) ## Build controller-gen into bin/.
$(CONTROLLER_GEN): | $(LOCALBIN)
	$(call go-install-tool,$(CONTROLLER_GEN),sigs.k8s.io/controller-tools/cmd/controller-gen,$(CONTROLLER_TOOLS_VERSION))

.PHONY: kustomize
kustomize: $(KUSTOMIZE) ## Build kustomize into bin/.
$(KUSTOMIZE): | $(LOCALBIN)
	$(call go-install-tool,$(KUSTOMIZE),sigs.k8s.io/kustomize/kustomize/v5,$(KUSTOMIZE_VERSION))

.PHONY: ginkgo
ginkgo: $(GINKGO) ## Build the ginkgo CLI (same version as go.mod) into bin/.
$(GINKGO): | $(LOCALBIN)
	$(call go-install-tool,$(GINKGO),github.com/onsi/ginkgo/v2/ginkgo,$(GINKGO_VERSION))

.PHONY: golangci-lint
golangci-lint: $(GOLANGCI_LINT) ## Build golangci-lint into bin/.
$(GOLANGCI_LINT): | $(LOCALBIN)
	$(call go-install-tool,$(GOLANGCI_LINT),github.com/golangci/golangci-lint/v2/cmd/golangci-lint,$(GOLANGCI_LINT_VERSION))

# Stamped like Helm's own release builds: its version, and as the default
# Kubernetes version of `helm template` and `helm lint` the release of the
# Kubernetes libraries it is built with.
.PHONY: helm
helm: $(HELM) ## Build helm (pinned in hack/tools/helm) into bin/.
$(HELM): | $(LOCALBIN)
	@echo "Building helm $(HELM_VERSION)"
	cd hack/tools/helm && set -e; \
	minor=$$(go list -m -f '{{.Version}}' k8s.io/client-go | cut -d. -f2); \
	ldflags="-X helm.sh/helm/v3/internal/version.version=$(HELM_VERSION)"; \
	for p in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do \
		ldflags="$$ldflags -X $$p.k8sVersionMajor=1 -X $$p.k8sVersionMinor=$$minor"; \
	done; \
	CGO_ENABLED=0 go build -trimpath -ldflags "$$ldflags" -o $(HELM) helm.sh/helm/v3/cmd/helm
	ln -sf $$(basename $(HELM)) $(LOCALBIN)/helm

# Rebuilt whenever its source or pins change.
.PHONY: validate-manifests
validate-manifests: $(VALIDATE_MANIFESTS) ## Build validate-manifests (OpenAPI validation with the pinned Kubernetes release's schemas) into bin/.
$(VALIDATE_MANIFESTS): $(wildcard hack/tools/validate-manifests/*.go) hack/tools/validate-manifests/go.mod hack/tools/validate-manifests/go.sum | $(LOCALBIN)
	cd hack/tools/validate-manifests && go build -o $(VALIDATE_MANIFESTS) .

# go-install-tool builds package $(2) at version $(3) and installs it as $(1)
# (a versioned file name) with a symlink from the unversioned name.
define go-install-tool
@[ -f "$(1)" ] || { \
set -e; \
package=$(2)@$(3) ;\
echo "Building $${package}" ;\
rm -f $(1) ;\
GOBIN=$(LOCALBIN) go install $${package} ;\
mv $(LOCALBIN)/$$(basename "$$(echo "$(2)" | sed 's,/v[0-9]*$$,,')") $(1) ;\
} ;\
ln -sf $$(basename $(1)) $(LOCALBIN)/$$(basename "$$(echo "$(2)" | sed 's,/v[0-9]*$$,,')")
endef
