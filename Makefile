# The two commands of the README, plus the pieces they are made of.
CARGO ?= cargo
PROFILE_FLAGS := --release
BIN := target/release/atoll
PRELOAD_LIB := target/release/libatoll_preload.so

.PHONY: demo test build lint loom clean pjdfstest install test-islands

# Where `make install` puts atoll (`atoll` in $(PREFIX)/bin, the preload
# library in $(PREFIX)/lib/atoll, where `atoll` finds it by itself; manual
# pages and bash/zsh/fish completions under $(PREFIX)/share).
PREFIX ?= /usr/local

# The pjdfstest conformance suite (Rust edition), pinned; built once and
# kept under target/, so later runs cost nothing.
PJDFSTEST_VERSION := 0.2.2
PJDFSTEST := target/pjdfstest/bin/pjdfstest

# Build everything (the `atoll` binary and libatoll_preload.so).
build:
	$(CARGO) build $(PROFILE_FLAGS) --workspace

# Set up and run a demo: a small C project built with make -j2 inside atoll.
demo: build
	./scripts/demo.sh

# Every test: unit, model-checked, end-to-end with real programs, bench smoke.
test: build lint pjdfstest
	$(CARGO) test $(PROFILE_FLAGS) --workspace
	$(MAKE) loom
	$(BIN) bench --quick
	$(BIN) bench co --quick
	$(BIN) bench transfer --quick
	$(BIN) bench recovery --quick

# The end-to-end tests that cover pipes, programs (builds, exec), processes
# (fork, fd sharing) and POSIX behaviour, again in a copy island and in an
# incoherent one: they must pass as in the default coherent island (Cosh's
# indistinguishability; docs/ARCHITECTURE.md, "Islands").
ISLAND_TESTS := --test pipes --test programs --test processes --test posix --test islands
test-islands: build
	ATOLL_TEST_ISLAND=copy $(CARGO) test $(PROFILE_FLAGS) -p atoll-tests $(ISLAND_TESTS)
	ATOLL_TEST_ISLAND=incoherent $(CARGO) test $(PROFILE_FLAGS) -p atoll-tests $(ISLAND_TESTS)

# Model-check the ring protocol and the block pool's claims (atoll-msg's
# synchronisation has loom twins) and the clustered objects' quiescence
# counters and mediator gate (atoll-co), and Cosh's shared pool header and
# polled channel (atoll-cosh).
loom:
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom $(CARGO) test --release -p atoll-msg --lib loom
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom $(CARGO) test --release -p atoll-co --lib loom
	RUSTFLAGS="--cfg loom" CARGO_TARGET_DIR=target/loom $(CARGO) test --release -p atoll-cosh --lib loom

pjdfstest:
	@$(PJDFSTEST) --version 2>/dev/null | grep -qxF 'pjdfstest $(PJDFSTEST_VERSION)' || \
	$(CARGO) install --locked --force --quiet pjdfstest --version $(PJDFSTEST_VERSION) --root target/pjdfstest

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy $(PROFILE_FLAGS) --workspace --all-targets -- -D warnings

install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/atoll
	install -D -m 0644 $(PRELOAD_LIB) $(DESTDIR)$(PREFIX)/lib/atoll/libatoll_preload.so
	install -d $(DESTDIR)$(PREFIX)/share/man/man1
	$(BIN) man --out $(DESTDIR)$(PREFIX)/share/man/man1 >/dev/null
	install -d $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
	  $(DESTDIR)$(PREFIX)/share/zsh/site-functions \
	  $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d
	$(BIN) completions bash > $(DESTDIR)$(PREFIX)/share/bash-completion/completions/atoll
	$(BIN) completions zsh > $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_atoll
	$(BIN) completions fish > $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/atoll.fish

clean:
	$(CARGO) clean
