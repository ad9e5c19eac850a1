# sanqos — build, test and demo. Run as root on a Debian machine; the deps
# target installs what is missing.

GO        ?= go
BIN       := bin
VERSION   := $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS   := -X main.version=$(VERSION)
APT_PKGS  := qemu-system-x86 debootstrap kmod tgt ethtool libiscsi-bin libiscsi-dev libnfs-dev nfs-ganesha nfs-ganesha-vfs rpcbind fio ipset iptables fuse3 iproute2 pkg-config gcc
REPORT    ?= report

.PHONY: all build deps test demo fmt vet clean bpf fuzz soak install kernel-lab diagram

all: build

# deps installs the Debian packages and Go modules sanqos needs. It only
# calls apt when something is missing, so it is cheap to repeat.
# Some packages are servers the lab runs in its own namespaces (tgt,
# nfs-ganesha, rpcbind): Debian would start and enable them on the host,
# so the install runs with a policy-rc.d that forbids starting services
# (unless the machine has one already), and the units of the servers it
# newly installed are disabled where systemd runs: the lab starts its
# own, and a storage host gets no NFS server or portmapper by accident
# (a tgt or rpcbind that was installed before is left as it was).
# LAB_UNITS: package:unit of the servers whose units deps disables when
# it installs the package (never a package that was there before).
LAB_UNITS := tgt:tgt.service nfs-ganesha:nfs-ganesha.service rpcbind:rpcbind.service rpcbind:rpcbind.socket
deps:
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		guard=""; if [ ! -e /usr/sbin/policy-rc.d ]; then \
			printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && guard=1; fi; \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; rc=$$?; \
		if [ -n "$$guard" ]; then rm -f /usr/sbin/policy-rc.d; fi; \
		[ $$rc -eq 0 ] || exit $$rc; \
		if [ -d /run/systemd/system ]; then \
			for pu in $(LAB_UNITS); do case " $$missing " in *" $${pu%%:*} "*) \
				{ systemctl disable --now $${pu#*:} >/dev/null 2>&1 && echo "disabled $${pu#*:} on the host (the lab runs its own)"; } || true;; esac; done; \
		fi; \
	fi
	$(GO) mod download

build: deps
	mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/sanqos ./cmd/sanqos
	CGO_ENABLED=0 $(GO) build -o $(BIN)/sanqos-lab ./cmd/sanqos-lab
	@if [ -d cmd/sanqos-iscsiload ]; then $(GO) build -o $(BIN)/sanqos-iscsiload ./cmd/sanqos-iscsiload; fi

# install puts the daemon, its systemd unit and the example configuration in
# place (the configuration only if there is none yet); DESTDIR stages it.
PREFIX ?= /usr/local
install:
	@test -x $(BIN)/sanqos || { echo "run 'make build' first (as root it also installs the build's dependencies)"; exit 1; }
	install -D -m 0755 $(BIN)/sanqos $(DESTDIR)$(PREFIX)/sbin/sanqos
	install -D -m 0644 deploy/sanqos.service $(DESTDIR)/etc/systemd/system/sanqos.service
	@if [ -e $(DESTDIR)/etc/sanqos/sanqos.toml ]; then echo "kept $(DESTDIR)/etc/sanqos/sanqos.toml"; 	else install -D -m 0644 deploy/sanqos.example.toml $(DESTDIR)/etc/sanqos/sanqos.toml; fi
	@echo "installed; then: systemctl daemon-reload && systemctl enable --now sanqos"

# bpf regenerates the block-latency probe's BPF object, which is committed
# and embedded so that sanqos needs no compiler at run time. Only this target
# needs clang (apt-get install clang; not a runtime dependency, so not in
# APT_PKGS) and llvm-strip; -g keeps the BTF the loader relocates against,
# llvm-strip -g drops the DWARF.
# The output is reproducible: a rebuild leaves git status clean.
BPF_DIR := internal/blkprobe
bpf:
	clang -O2 -g -target bpf -mcpu=v3 -Wall -Werror -c $(BPF_DIR)/bpf/blkprobe.bpf.c -o $(BPF_DIR)/blkprobe.bpf.o
	llvm-strip -g $(BPF_DIR)/blkprobe.bpf.o

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# PURE_PKGS decide and simulate and touch no kernel: vet cross-compiles
# them (and their tests) for darwin to keep it so; internal/lint's
# TestPurePackagesImportNoKernel checks the same list's imports.
PURE_PKGS := ./internal/engine/... ./internal/control/... ./internal/policy/... ./internal/smoothing/... ./internal/sim/... ./internal/latency/...
vet:
	$(GO) vet ./...
	GOOS=darwin CGO_ENABLED=0 $(GO) vet $(PURE_PKGS)

# test is what CI runs: formatting, vet, every unit test, the race detector
# on the packages with goroutines, and the root-only integration tests
# (network namespaces, tgt, iSCSI, NFQUEUE), one package at a time so that
# timing measurements do not compete with each other; then the kernel lab on
# Debian's cloud kernel (about 1.5 min warm, 3 min cold).
test: deps fmt vet build
	$(GO) test -count=1 -p 1 -timeout 60m ./...
	$(GO) test -count=1 -race -short ./internal/...
	$(MAKE) fuzz FUZZTIME=6s
	$(MAKE) soak SOAK=3m
	$(MAKE) kernel-lab KERNEL=cloud SUITE=all

# soak runs the fig5.11 workload against one daemon for SOAK and fails if
# its RSS, threads, descriptors or kernel objects grow, or if it leaves
# anything behind (sanqos lab soak --help). make test runs 3 minutes.
SOAK ?= 1h
soak: build
	$(BIN)/sanqos lab soak --duration $(SOAK) --interval 5s --out $(BIN)/soak

# fuzz runs every fuzz target for FUZZTIME each (make test: 6 s each,
# under 2 minutes in all; a name a package lacks only warns). Their seed corpora are in each package's
# testdata/fuzz and run with the ordinary tests too; a failure found here
# is written there: commit it with the fix.
# The fuzzer runs on Go 1.27.3, fetched from the module proxy like a
# module (about 76 MB, once): Go 1.26's fuzzing coordinator can fail a
# target with a bare "context deadline exceeded" as -fuzztime ends, having
# found nothing (golang/go#75804; it failed our CI on 2026-11-28). 1.27
# carries the fix; the rest of the build stays on the machine's Go.
FUZZ_GO  ?= GOTOOLCHAIN=go1.27.3 $(GO)
FUZZTIME ?= 30s
FUZZ_TARGETS := \
	internal/diskstats:FuzzParse \
	internal/mountinfo:FuzzParse internal/mountinfo:FuzzUnescape \
	internal/discover:FuzzParseTgtShow internal/discover:FuzzParseLIOInfo \
	internal/discover:FuzzParseProcNet internal/discover:FuzzParseExports \
	internal/nfq:FuzzParseDatagram \
	internal/throttle:FuzzParseIPv4TCP internal/throttle:FuzzParseTCP \
	internal/config:FuzzDecode internal/ctl:FuzzRequestLines internal/ctl:FuzzParseManual
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; echo "fuzz $$pkg $$fn ($(FUZZTIME))"; \
		$(FUZZ_GO) test -run "^$$fn\$$" -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) ./$$pkg; \
	done

# kernel-lab boots Debian bookworm's own kernel (KERNEL=cloud|rt|generic)
# under qemu and runs the kernel-stack suite (SUITE) inside: LIO, open-iscsi,
# dm-delay, LVM, netem; SUITE=systemd (and all's second boot) boots systemd
# as PID 1 and tests deploy/sanqos.service as it ships. The rootfs and
# kernel are cached in /var/cache/sanqos-kernel-lab (first run: a few
# minutes).
KERNEL    ?= cloud
SUITE     ?= all
kernel-lab: build
	CGO_ENABLED=0 $(GO) test -c -o $(BIN)/sanqos-guest.test ./internal/lab/vm/guesttest
	$(BIN)/sanqos lab vm --kernel $(KERNEL) --suite $(SUITE) --unit deploy/sanqos.service

# diagram rewrites docs/packages.md from the imports (go test ./internal/lint
# fails while it is out of date).
diagram:
	$(GO) test -count=1 -run TestPackageDiagram ./internal/lint -update

demo: build
	$(BIN)/sanqos lab demo --out $(REPORT)

clean:
	rm -rf $(BIN) $(REPORT)
