# sanqos — build, install, test and demo.
#
#   make build              the binaries in bin/; installs nothing (a Go toolchain is all it needs)
#   make install            the daemon only: binary, systemd unit, configuration (PREFIX, DESTDIR)
#   make uninstall          removes what install put there (a configuration you changed stays)
#   make deb                bin/sanqos_VERSION_ARCH.deb (dpkg-deb; installs lintian if missing)
#   make test, make demo    as root on Debian: install the lab's packages first (make deps)
#   make deps (lab-deps)    the Debian packages and Go modules the lab and the tests need

GO        ?= go
BIN       ?= bin
VERSION   := $(shell git describe --always --dirty 2>/dev/null || echo dev)
COMMIT    := $(shell git rev-parse HEAD 2>/dev/null)
BUILDDATE := $(shell date -u $${SOURCE_DATE_EPOCH:+-d @$$SOURCE_DATE_EPOCH} +%Y-%m-%dT%H:%M:%SZ)
# sanqos version prints these; a plain go build falls back on what the go
# command stamped (vcs.revision, vcs.time). SOURCE_DATE_EPOCH, where set
# (reproducible package builds), fixes the build date.
LDFLAGS   := -X main.version=$(VERSION) -X main.commit=$(COMMIT) -X main.date=$(BUILDDATE) $(EXTRA_LDFLAGS)
APT_PKGS  := qemu-system-x86 debootstrap kmod tgt ethtool libiscsi-bin libiscsi-dev libnfs-dev nfs-ganesha nfs-ganesha-vfs rpcbind fio ipset iptables nftables fuse3 iproute2 pkg-config gcc prometheus
REPORT    ?= report

.PHONY: all build lab-build deps lab-deps test demo fmt vet clean bpf fuzz soak install uninstall kernel-lab diagram deb

all: build

# deps (or lab-deps) installs the Debian packages and Go modules the lab,
# the load generator and the tests need; the daemon itself needs none of
# them to build or run. It only calls apt when something is missing, so it
# is cheap to repeat.
# Some packages are servers the lab runs in its own namespaces (tgt,
# nfs-ganesha, rpcbind): Debian would start and enable them on the host,
# so the install runs with a policy-rc.d that forbids starting services
# (unless the machine has one already), and the units of the servers it
# newly installed are disabled (and stopped, where systemd runs; where it
# does not, disabling removes their links for the next boot): the lab starts its
# own, and a storage host gets no NFS server or portmapper by accident
# (a tgt or rpcbind that was installed before is left as it was).
# LAB_UNITS: package:unit of the servers whose units deps disables when
# it installs the package (never a package that was there before).
# prometheus (and its promtool) checks the alert rules and runs the
# dashboard's queries against a live daemon in a test that starts its own.
# APT_NORECS are installed without their Recommends: prometheus would
# bring prometheus-node-exporter, another server with timers of its own.
LAB_UNITS := tgt:tgt.service nfs-ganesha:nfs-ganesha.service rpcbind:rpcbind.service rpcbind:rpcbind.socket nftables:nftables.service prometheus:prometheus.service
APT_NORECS := prometheus
deps: lab-deps
lab-deps:
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		guard=""; if [ ! -e /usr/sbin/policy-rc.d ]; then \
			printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 755 /usr/sbin/policy-rc.d && guard=1; fi; \
		recs=""; norecs=""; for p in $$missing; do case " $(APT_NORECS) " in *" $$p "*) norecs="$$norecs $$p";; *) recs="$$recs $$p";; esac; done; \
		apt-get update -qq && { [ -z "$$recs" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$recs >/dev/null; } && \
			{ [ -z "$$norecs" ] || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$norecs >/dev/null; }; rc=$$?; \
		if [ -n "$$guard" ]; then rm -f /usr/sbin/policy-rc.d; fi; \
		[ $$rc -eq 0 ] || exit $$rc; \
		now=--now; [ -d /run/systemd/system ] || now=""; \
		if command -v systemctl >/dev/null; then \
			for pu in $(LAB_UNITS); do case " $$missing " in *" $${pu%%:*} "*) \
				{ systemctl disable $$now $${pu#*:} >/dev/null 2>&1 && echo "disabled $${pu#*:} on the host (the lab and the tests run their own)"; } || true;; esac; done; \
		fi; \
	fi
	$(GO) mod download

# build compiles and installs nothing: the daemon and the lab's binary are
# pure Go. The lab's load generator links libiscsi and libnfs (cgo) and is
# built only where their development packages are (make deps installs them).
build:
	mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/sanqos ./cmd/sanqos
	$(MAKE) --no-print-directory $(DOC)/man8/sanqos.8
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/sanqos-lab ./cmd/sanqos-lab
	@if pkg-config --exists libiscsi libnfs 2>/dev/null; then \
		echo "$(GO) build -o $(BIN)/sanqos-iscsiload ./cmd/sanqos-iscsiload"; \
		$(GO) build -o $(BIN)/sanqos-iscsiload ./cmd/sanqos-iscsiload; \
	else echo "not building sanqos-iscsiload (the lab's load generator): it needs libiscsi-dev and libnfs-dev (make deps)"; fi

# lab-build: the lab's packages, then every binary, the load generator too.
lab-build: deps
	$(MAKE) build
	@test -x $(BIN)/sanqos-iscsiload || { echo "sanqos-iscsiload was not built"; exit 1; }

# install puts the daemon only in place: the binary in $(PREFIX)/sbin, its
# systemd unit, a minimal configuration (deploy/sanqos.toml: the defaults,
# commented; only if there is none yet, an existing one is kept), the
# documented example beside the other docs, the manual pages and the bash
# completion. DESTDIR stages it. The unit names /usr/local/sbin/sanqos;
# for another PREFIX its Exec lines are rewritten here, so
# deploy/sanqos.service stays the one source. Nothing of the lab is
# installed, and no package manager runs.
PREFIX     ?= /usr/local
SBINDIR    ?= $(PREFIX)/sbin
UNITDIR    ?= /etc/systemd/system
SYSCONFDIR ?= /etc/sanqos
MANDIR     ?= $(PREFIX)/share/man
DOCDIR     ?= $(PREFIX)/share/doc/sanqos
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
# The manual pages and the completion are generated from the binary's
# --help (internal/helpdoc), so they never drift from it.
DOC       := $(BIN)/doc
MANPAGES   = $(wildcard $(DOC)/man8/*.8)
install: $(BIN)/sanqos $(DOC)/man8/sanqos.8
	install -D -m 0755 $(BIN)/sanqos $(DESTDIR)$(SBINDIR)/sanqos
	install -d -m 0755 $(DESTDIR)$(UNITDIR)
	sed -e '/^Exec/s|/usr/local/sbin/sanqos|$(SBINDIR)/sanqos|g' -e '/^Exec/s|/etc/sanqos/|$(SYSCONFDIR)/|g' \
		deploy/sanqos.service > $(DESTDIR)$(UNITDIR)/sanqos.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/sanqos.service
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/sanqos.toml ]; then echo "kept $(DESTDIR)$(SYSCONFDIR)/sanqos.toml"; \
	else install -D -m 0644 deploy/sanqos.toml $(DESTDIR)$(SYSCONFDIR)/sanqos.toml; fi
	install -D -m 0644 deploy/sanqos.example.toml $(DESTDIR)$(DOCDIR)/examples/sanqos.example.toml
	install -d -m 0755 $(DESTDIR)$(MANDIR)/man8
	install -m 0644 $(MANPAGES) $(DESTDIR)$(MANDIR)/man8/
	install -D -m 0644 $(DOC)/bash-completion/sanqos $(DESTDIR)$(BASHCOMPDIR)/sanqos
	@echo "installed; then: systemctl daemon-reload && systemctl enable --now sanqos"

# uninstall removes what install put in place. The configuration goes only
# while it is still as installed (the minimal one, or the example that
# older versions installed): one you edited stays, and is named. Stop the
# service first (systemctl disable --now sanqos).
uninstall:
	rm -f $(DESTDIR)$(SBINDIR)/sanqos $(DESTDIR)$(UNITDIR)/sanqos.service
	rm -f $(DESTDIR)$(MANDIR)/man8/sanqos.8 $(DESTDIR)$(MANDIR)/man8/sanqos-*.8 $(DESTDIR)$(BASHCOMPDIR)/sanqos
	rm -f $(DESTDIR)$(DOCDIR)/examples/sanqos.example.toml
	@rmdir $(DESTDIR)$(DOCDIR)/examples $(DESTDIR)$(DOCDIR) 2>/dev/null || true
	@if [ -e $(DESTDIR)$(SYSCONFDIR)/sanqos.toml ]; then \
		if cmp -s deploy/sanqos.toml $(DESTDIR)$(SYSCONFDIR)/sanqos.toml || cmp -s deploy/sanqos.example.toml $(DESTDIR)$(SYSCONFDIR)/sanqos.toml; then \
			rm -f $(DESTDIR)$(SYSCONFDIR)/sanqos.toml; \
		else echo "kept $(DESTDIR)$(SYSCONFDIR)/sanqos.toml: you changed it (remove it yourself)"; fi; fi
	@rmdir $(DESTDIR)$(SYSCONFDIR) 2>/dev/null || true
	@echo "uninstalled; then: systemctl daemon-reload"

$(BIN)/sanqos:
	mkdir -p $(BIN)
	CGO_ENABLED=0 $(GO) build -ldflags "$(LDFLAGS)" -o $(BIN)/sanqos ./cmd/sanqos

# The pages' date is the build's (SOURCE_DATE_EPOCH where set), their
# footer the version; a binary rebuilt makes them again.
DOCDATE := $(firstword $(subst T, ,$(BUILDDATE)))
$(DOC)/man8/sanqos.8: $(BIN)/sanqos
	rm -rf $(DOC)
	$(GO) run ./internal/helpdoc/genman -bin $(BIN)/sanqos -out $(DOC) -version $(VERSION) -date $(DOCDATE)

# deb builds $(BIN)/sanqos_VERSION_ARCH.deb with dpkg-deb from a staged
# make install PREFIX=/usr (deploy/debian/build.sh: control, maintainer
# scripts, copyright, changelog, lintian overrides), then checks it with
# lintian, which it installs where it is missing (without it, where apt
# cannot install it, the package is built unchecked, and said so). The
# version comes from git describe (deploy/debian/version.sh); DEB_VERSION
# overrides it, LINTIAN=no skips the check. deploy/debian/test-cycle.sh
# installs, upgrades, removes and purges packages it built.
deb:
	@lintian=yes; if [ "$(LINTIAN)" = no ]; then lintian=no; \
	elif ! command -v lintian >/dev/null 2>&1; then echo "installing: lintian"; \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq lintian >/dev/null; } || \
		{ lintian=no; echo "lintian could not be installed: the package is not checked"; }; fi; \
	BIN=$(BIN) GO=$(GO) DEB_VERSION=$(DEB_VERSION) LINTIAN=$$lintian deploy/debian/build.sh

# bpf regenerates the block-latency probe's BPF object, which is committed
# and embedded so that sanqos needs no compiler at run time. Only this target
# needs clang (apt-get install clang; not a runtime dependency, so not in
# APT_PKGS) and llvm-strip; -g keeps the BTF the loader relocates against,
# llvm-strip -g drops the DWARF.
# The output is reproducible: a rebuild leaves git status clean.
# The edt classifier (internal/act/edt) is built the same way.
BPF_DIR := internal/observe/blkprobe
EDT_DIR := internal/act/edt
bpf:
	clang -O2 -g -target bpf -mcpu=v3 -Wall -Werror -c $(BPF_DIR)/bpf/blkprobe.bpf.c -o $(BPF_DIR)/blkprobe.bpf.o
	llvm-strip -g $(BPF_DIR)/blkprobe.bpf.o
	clang -O2 -g -target bpf -mcpu=v3 -Wall -Werror -c $(EDT_DIR)/bpf/edt.bpf.c -o $(EDT_DIR)/edt.bpf.o
	llvm-strip -g $(EDT_DIR)/edt.bpf.o

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

# PURE_PKGS decide and simulate and touch no kernel: vet cross-compiles
# them (and their tests) for darwin to keep it so; internal/lint's
# TestPurePackagesImportNoKernel checks the same list's imports.
PURE_PKGS := ./internal/decide/engine/... ./internal/decide/control/... ./internal/decide/policy/... ./internal/decide/smoothing/... ./internal/sim/... ./internal/observe/latency/...
vet:
	$(GO) vet ./...
	GOOS=darwin CGO_ENABLED=0 $(GO) vet $(PURE_PKGS)

# test is what CI runs: formatting, vet, every unit test, the race detector
# on the packages with goroutines, and the root-only integration tests
# (network namespaces, tgt, iSCSI, NFQUEUE), one package at a time so that
# timing measurements do not compete with each other; then the kernel lab on
# Debian's cloud kernel (about 1.5 min warm, 3 min cold).
# Its prerequisites install the lab's packages first: on a fresh Debian
# machine make test needs nothing else.
test: lab-build fmt vet
	$(GO) test -count=1 -p 1 -timeout 60m ./...
	$(GO) test -count=1 -race -short -timeout 30m ./internal/...
	$(MAKE) fuzz FUZZTIME=6s
	$(MAKE) soak SOAK=3m
	$(MAKE) kernel-lab KERNEL=cloud SUITE=all

# soak runs the fig5.11 workload against one daemon for SOAK and fails if
# its RSS, threads, descriptors or kernel objects grow, or if it leaves
# anything behind (sanqos lab soak --help). make test runs 3 minutes.
SOAK ?= 1h
soak: lab-build
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
	internal/observe/diskstats:FuzzParse \
	internal/observe/mountinfo:FuzzParse internal/observe/mountinfo:FuzzUnescape \
	internal/observe/discover:FuzzParseTgtShow internal/observe/discover:FuzzParseLIOInfo \
	internal/observe/discover:FuzzParseProcNet internal/observe/discover:FuzzParseExports \
	internal/act/nfq:FuzzParseDatagram \
	internal/act/packetpath:FuzzParseIPv4TCP internal/act/packetpath:FuzzParseTCP \
	internal/config:FuzzDecode internal/serve/ctl:FuzzRequestLines internal/serve/ctl:FuzzParseManual
fuzz:
	@set -e; for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; fn=$${t##*:}; echo "fuzz $$pkg $$fn ($(FUZZTIME))"; \
		$(FUZZ_GO) test -run "^$$fn\$$" -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) ./$$pkg; \
	done

# kernel-lab boots Debian bookworm's own kernel (KERNEL=cloud|rt|generic)
# under qemu and runs the kernel-stack suite (SUITE) inside: LIO, open-iscsi,
# dm-delay, LVM, netem; SUITE=systemd (and all's second boot) boots systemd
# as PID 1 and tests deploy/sanqos.service as it ships, and the Debian
# package (make deb, unchecked by lintian here: make deb checks it) through
# install, upgrade, remove and purge. The rootfs and kernel are cached in
# /var/cache/sanqos-kernel-lab (first run: a few minutes).
KERNEL    ?= cloud
SUITE     ?= all
kernel-lab: build
	CGO_ENABLED=0 $(GO) test -c -o $(BIN)/sanqos-guest.test ./internal/lab/vm/guesttest
	@debflags=""; case "$(SUITE)" in systemd|all|deb) \
		rm -rf $(BIN)/kernel-lab-deb; echo "building the package for the systemd boot: make deb LINTIAN=no"; \
		deb=$$($(MAKE) --no-print-directory -s deb BIN=$(BIN)/kernel-lab-deb LINTIAN=no | tail -n 1) && [ -f "$$deb" ] || exit 1; \
		debflags="--deb $$deb --deb-cycle deploy/debian/test-cycle.sh";; esac; \
	echo "$(BIN)/sanqos lab vm --kernel $(KERNEL) --suite $(SUITE) --unit deploy/sanqos.service $$debflags"; \
	$(BIN)/sanqos lab vm --kernel $(KERNEL) --suite $(SUITE) --unit deploy/sanqos.service $$debflags

# diagram rewrites docs/packages.md from the imports (go test ./internal/lint
# fails while it is out of date).
diagram:
	$(GO) test -count=1 -run TestPackageDiagram ./internal/lint -update

demo: lab-build
	$(BIN)/sanqos lab demo --out $(REPORT)

clean:
	rm -rf $(BIN) $(REPORT)
