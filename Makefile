# Fibril build and test entry points.
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -s -w -X main.version=$(VERSION)
BIN      := bin
FUZZTIME ?= 10s

.PHONY: build run test fuzz bench bench-log vet clean

build:
	@mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN)/ ./tools/...

# Build, then run the broker on its built-in config: the client protocol on
# 127.0.0.1:7420, data under ./data. Ctrl-C shuts it down cleanly.
run: build
	./$(BIN)/fibrild

vet:
	$(GO) vet ./...

# All tests, with the race detector.
test: vet
	$(GO) test -race -count=1 -timeout 9m ./...

# Brief runs of every fuzz target (CI runs these too).
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeRecord$$' -fuzztime $(FUZZTIME) ./wal
	$(GO) test -run '^$$' -fuzz '^FuzzRecoverSegment$$' -fuzztime $(FUZZTIME) ./wal
	$(GO) test -run '^$$' -fuzz '^FuzzReadFrame$$' -fuzztime $(FUZZTIME) ./appliance/wire

# Go benchmarks of the packages, then the log benchmark matrix.
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./...
	$(GO) run ./tools/fibril log bench --floor
	$(GO) run ./tools/fibril log bench

clean:
	rm -rf $(BIN)
