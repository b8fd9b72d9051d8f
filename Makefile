# Targets for developers and CI. `make` runs the whole test suite against
# real redis-server processes, installing Redis first when run as root.

GO ?= go

.PHONY: test test-servers redis fmt-check vet bench servercost chaos chaos-long chaos-rest

# The suite runs under internal/cmd/testsummary, which runs go test -json
# and prints a line per package as it finishes and the whole output of
# each failing test, then a summary: every package with its counts, the
# totals, every skipped test with its reason and the ten slowest tests. It
# fails with go test's exit status, or with 1 if go test exited 0 but its
# stream shows a failure. TESTJSON=file also keeps go test's raw -json
# stream.
TESTJSON ?=

test: redis fmt-check vet
	$(GO) run ./internal/cmd/testsummary -go '$(GO)' $(if $(TESTJSON),-json-out '$(TESTJSON)') \
		-- -race -count=1 -timeout 15m ./...

# The behaviours that depend on the server, against every other build of
# redis-server found in SERVERS (a folder per build, each holding
# redis-server and redis-cli: ../shared/servers on the project's machines),
# as test does against the one on PATH: the conformance suite (acquire,
# release, re-entry, read-write, waiting, fencing on standalone, Sentinel,
# Cluster and Redlock quorums), grants, permits, the scripts' own tests and
# the Redis fence. About a minute per build on 2 cores. With no builds
# there, it says so and passes: the Debian server is covered by test.
SERVERS ?= ../shared/servers
SERVER_TESTS_GUARD = ^(TestConformance|TestReleaseGrantsKeyToWaiter|TestGrantsFollowQueueOrder|TestGrantKeepsMinHold|TestWaitingReadersJoinAfterRelease|TestGrantToDeadWaiterExpires|TestPermit.*|TestReleasePublishesOnlyWhenSomebodyWaits|TestReentryCostsNoRoundTrip|TestWrongTypeNamesTheKeyEverywhere|TestOddFencingCounterRefused|TestClaimFenced.*|TestReleaseTellsExpiredFromTaken|TestWithClaim.*)$$
SERVER_TESTS_FENCE = ^TestRedis

test-servers: redis
	@found=0; \
	for dir in $(SERVERS)/*/; do \
		[ -x "$$dir/redis-server" ] || continue; \
		found=1; bin="$$(cd "$$dir" && pwd)"; \
		echo "=== $$("$$bin/redis-server" --version) ($$bin)"; \
		PATH="$$bin:$$PATH" $(GO) run ./internal/cmd/testsummary -go '$(GO)' -- -race -count=1 -timeout 10m -run '$(SERVER_TESTS_GUARD)' ./guard/ || exit 1; \
		PATH="$$bin:$$PATH" $(GO) run ./internal/cmd/testsummary -go '$(GO)' -- -race -count=1 -timeout 10m ./guard/internal/redisstore/ || exit 1; \
		PATH="$$bin:$$PATH" $(GO) run ./internal/cmd/testsummary -go '$(GO)' -- -race -count=1 -timeout 10m -run '$(SERVER_TESTS_FENCE)' ./fence/ || exit 1; \
	done; \
	if [ $$found = 0 ]; then echo "test-servers: no redis-server builds in $(SERVERS); nothing to run"; fi

# Tests start their own redis-server on free loopback ports; they only need
# the binary on PATH, and libfaketime (Debian's faketime) for the tests that
# step a server's clock (redistest.StartWithClock). When installing, we stop
# and disable the service the Debian package may have started on 6379, and
# start nothing ourselves.
FAKETIME_LIBS = /usr/lib/*/faketime/libfaketime.so.1 /usr/lib/faketime/libfaketime.so.1 /usr/local/lib/faketime/libfaketime.so.1
HAVE_FAKETIME = found=; for f in $(FAKETIME_LIBS); do [ -e "$$f" ] && found=1; done; [ -n "$$found" ]

redis:
	@missing=""; \
	command -v redis-server >/dev/null 2>&1 || missing="redis-server"; \
	( $(HAVE_FAKETIME) ) || missing="$$missing faketime"; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" != 0 ]; then \
		echo "missing:$$missing: install the Debian packages (sudo apt-get install$$missing) and re-run make test" >&2; \
		exit 1; \
	fi; \
	set -e; \
	echo "missing:$$missing: installing the Debian packages"; \
	apt-get update -qq; \
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing; \
	case "$$missing" in *redis-server*) \
		if [ -d /run/systemd/system ]; then \
			systemctl disable --now redis-server >/dev/null 2>&1 || true; \
		elif command -v service >/dev/null 2>&1; then \
			service redis-server stop >/dev/null 2>&1 || true; \
		fi;; \
	esac; \
	command -v redis-server >/dev/null 2>&1 || { echo "redis-server is still not on PATH after installing it" >&2; exit 1; }; \
	( $(HAVE_FAKETIME) ) || { echo "libfaketime is still missing after installing faketime (looked for $(FAKETIME_LIBS))" >&2; exit 1; }

fmt-check:
	@files="$$(gofmt -l .)"; \
	if [ -n "$$files" ]; then \
		echo "gofmt needed on:" >&2; echo "$$files" >&2; exit 1; \
	fi

vet:
	$(GO) vet ./...

# The side-by-side benchmark of guard, redsync, redislock and a raw SET NX
# baseline (bench/, its own module). Its headline figures are measured as
# users run a service: nothing pinned, GOMAXPROCS = every CPU, loopback, a
# cancelable context per operation; then PING, sequential and throughput
# again with the client pinned to CPU 0 (GOMAXPROCS 1) and each redis-server
# to CPU 1, for a second table. About four to five minutes on 2 cores,
# depending on how many disturbed cases it re-runs; BENCHFLAGS=-quick runs
# smaller cases in under a minute. It writes bench/results.json,
# bench/RESULTS.md and the charts bench/*.png. guard's own micro-benchmarks:
# go test -run '^$' -bench . -benchtime 2s ./guard/
BENCHFLAGS ?=

bench: redis
	cd bench && $(GO) run ./cmd/bench -out results.json $(BENCHFLAGS) && \
		$(GO) run ./cmd/charts -in results.json -dir . && \
		$(GO) run ./cmd/report -in results.json -out RESULTS.md

# Instructions redis-server runs per uncontended acquire+release of each
# library, counted under valgrind's callgrind (it needs valgrind): about two
# minutes, and the count does not move with the machine's load. Writes
# bench/SERVERCOST.md.
servercost: redis
	@command -v valgrind >/dev/null || { echo "servercost needs valgrind (apt-get install valgrind)"; exit 1; }
	cd bench && $(GO) run ./cmd/servercost -n 2000 -out SERVERCOST.md

# The fault-injection suite (internal/chaos, internal/soak, the fuzz
# targets), about seven minutes on 2 cores, loopback only, and every part
# stops by itself. It writes chaos-report/ (the suite's report and the
# workers' histories, the soak's section, the fuzz logs) and RELIABILITY.md
# from them. SEED picks the fault schedule; FUZZTIME bounds each fuzz target.
#
# chaos-long is the same with every scenario running at once for DURATION
# (a Go duration, an hour by default: over a thousand faults and tens of
# thousands of operations); RELIABILITY.md is published from it.
SEED ?= 15
FUZZTIME ?= 20s
DURATION ?= 60m
CHAOS_DIR = $(CURDIR)/chaos-report

chaos: redis
	rm -rf $(CHAOS_DIR) && mkdir -p $(CHAOS_DIR)
	$(GO) test -race -count=1 -timeout 15m -run '^TestChaos$$' ./internal/chaos/ \
		-args -chaos.profile=full -chaos.seed=$(SEED) -chaos.out=$(CHAOS_DIR)
	$(MAKE) --no-print-directory chaos-rest

chaos-long: redis
	rm -rf $(CHAOS_DIR) && mkdir -p $(CHAOS_DIR)
	$(GO) test -race -count=1 -timeout 3h -run '^TestChaos$$' ./internal/chaos/ \
		-args -chaos.profile=long -chaos.duration=$(DURATION) -chaos.seed=$(SEED) -chaos.out=$(CHAOS_DIR)
	$(MAKE) --no-print-directory chaos-rest

# chaos-rest: the soak and the fuzz targets after either suite, then
# RELIABILITY.md from the directory.
chaos-rest:
	$(GO) test -race -count=1 -timeout 10m -run '^TestSoak$$' ./internal/soak/ \
		-soak.leases 10000 -soak.duration 60s -soak.out $(CHAOS_DIR)/soak.md
	@set -e; for t in FuzzKey@guard FuzzOptions@guard FuzzIdempotencyKey@httpguard; do \
		target=$${t%@*}; pkg=$${t#*@}; log=$(CHAOS_DIR)/fuzz-$$t.log; \
		echo "$(GO) test -run '^$$' -fuzz '^$$target$$' -fuzztime $(FUZZTIME) ./$$pkg/"; \
		$(GO) test -run '^$$' -fuzz "^$$target\$$" -fuzztime $(FUZZTIME) ./$$pkg/ >$$log 2>&1 || { cat $$log; exit 1; }; \
		tail -n 3 $$log; \
	done
	$(GO) run ./internal/chaos/cmd/reliability -dir $(CHAOS_DIR) -out RELIABILITY.md
