# Thin wrappers; the logic lives in scripts/. CI runs `make test` (.ci/run).
.PHONY: build serve test check gotest s3test gcstest genproto genproto-check fuzz bench-table bench-selector clean conformance bench bench-quick

build:
	go build -o .bin/reverie ./cmd/reverie

serve:
	go run ./cmd/reverie serve

# The whole suite: static checks, generated-code check, race-enabled tests,
# and the grpcurl acceptance check against the built binary.
test:
	scripts/test.sh

check:
	scripts/test.sh --check-only

gotest:
	go test -race -count=1 ./...

# The remote snapshot tests against MinIO on loopback (installs it into .bin/).
s3test:
	scripts/test-s3.sh

# The gs:// snapshot tests against fake-gcs-server on loopback (installs it
# into .bin/), in binaries built with -tags gcs.
gcstest:
	scripts/test-gcs.sh

genproto:
	scripts/genproto.sh

genproto-check:
	scripts/genproto.sh --check

fuzz:
	go test -run XXX -fuzz FuzzInsertStream -fuzztime 60s ./server
	go test -run XXX -fuzz FuzzSampleStream -fuzztime 60s ./server
	go test -run XXX -fuzz FuzzConn -fuzztime 60s -fuzzminimizetime 5s ./server/h2grpc

bench-table:
	go test -run XXX -bench BenchmarkTable -benchtime 1000000x ./internal/table -args -table.sizes 1000,100000,10000000

bench-selector:
	go test -run XXX -bench BenchmarkSelector ./selector

# Conformance with Reverb, both ways: the dm-reverb client and reverie's Go
# client, each against Reverb's own server and reverie (installs .venv-reverb).
conformance:
	scripts/conformance.sh

# reverie against Reverb 0.14.0 on the same machine, same tables, same
# clients (issue 7): results in bench/results/, plots in docs/, about 14 min.
# bench-quick: a reduced run for development, about 100 s, into
# bench/results/quick/. Both install what they need (see bench/bench.sh).
bench:
	bench/bench.sh

bench-quick:
	bench/bench.sh --quick

clean:
	rm -rf .bin
