# sanqos — build, test and demo. Run as root on a Debian machine; the deps
# target installs what is missing.

GO        ?= go
BIN       := bin
VERSION   := $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)
APT_PKGS  := qemu-system-x86 debootstrap kmod tgt ethtool libiscsi-bin libiscsi-dev fio ipset iptables fuse3 libnetfilter-queue-dev iperf3 iproute2 pkg-config gcc
REPORT    ?= report

.PHONY: all build deps test demo fmt vet clean kernel-lab

all: build

# deps installs the Debian packages and Go modules sanqos needs. It only
# calls apt when something is missing, so it is cheap to repeat.
deps:
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	fi
	$(GO) mod download

build: deps
	mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/sanqos ./cmd/sanqos
	@if [ -d cmd/sanqos-iscsiload ]; then $(GO) build -o $(BIN)/sanqos-iscsiload ./cmd/sanqos-iscsiload; fi

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# test is what CI runs: formatting, vet, every unit test, the race detector
# on the packages with goroutines, and the root-only integration tests
# (network namespaces, tgt, iSCSI, NFQUEUE), one package at a time so that
# timing measurements do not compete with each other; then the kernel lab on
# Debian's cloud kernel (about 1.5 min warm, 3 min cold).
test: deps fmt vet build
	$(GO) test -count=1 -p 1 -timeout 60m ./...
	$(GO) test -count=1 -race -short ./internal/...
	$(MAKE) kernel-lab KERNEL=cloud SUITE=all

# kernel-lab boots Debian bookworm's own kernel (KERNEL=cloud|rt|generic)
# under qemu and runs the kernel-stack suite (SUITE) inside: LIO, open-iscsi,
# dm-delay, LVM, netem. The rootfs and kernel are cached in
# /var/cache/sanqos-kernel-lab (first run: a few minutes).
KERNEL    ?= cloud
SUITE     ?= all
kernel-lab: build
	CGO_ENABLED=0 $(GO) test -c -o $(BIN)/sanqos-guest.test ./internal/lab/vm/guesttest
	$(BIN)/sanqos lab vm --kernel $(KERNEL) --suite $(SUITE)

demo: build
	$(BIN)/sanqos lab demo --out $(REPORT)

clean:
	rm -rf $(BIN) $(REPORT)
