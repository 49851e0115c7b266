# detcheck: build, test, install. `make help` lists the targets and variables.

PREFIX  ?= /usr/local
DESTDIR ?=
SANITIZE ?= 0
PORTABLE ?= 0
ifeq ($(PORTABLE),1)
BUILD   ?= build-portable
else ifeq ($(SANITIZE),1)
BUILD   ?= build-san
else
BUILD   ?= build
endif

comma := ,

# The version comes from the public header. The shared library is
# libdetcheck.so.MAJOR.MINOR.PATCH, SONAME libdetcheck.so.MAJOR, with the
# .so.MAJOR and .so links beside it.
version_of = $(shell sed -n 's/^.define DCK_VERSION_$(1) \([0-9][0-9]*\)$$/\1/p' include/detcheck.h)
VERSION := $(call version_of,MAJOR).$(call version_of,MINOR).$(call version_of,PATCH)
SONAME  := libdetcheck.so.$(call version_of,MAJOR)
SHLIB   := libdetcheck.so.$(VERSION)

CC      ?= cc
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
ifeq ($(NVCC),)
CUDA    ?= 0
else
CUDA    ?= 1
endif
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))

PKGS    := libxxhash libzstd yaml-0.1 jansson zlib

# The portable build (make PORTABLE=1, into build-portable; HACKING.md):
# zig cc for glibc 2.28 (ci/zigcc.sh, zig from `sh ci/venv.sh wheel`), the
# dependencies linked statically (their .a beside their pkg-config libdir),
# and no rpath to this machine's CUDA or MPI (the run-time finder searches
# for them). The CLI's relative rpath finds lib/ of the tarball.
ifeq ($(PORTABLE),1)
ifneq ($(filter-out help clean deps,$(or $(MAKECMDGOALS),all)),)
WHEEL_PY := $(shell sh ci/venv.sh wheel)
ifeq ($(WHEEL_PY),)
$(error PORTABLE=1 needs zig: sh ci/venv.sh wheel failed (see above))
endif
export DCK_ZIG := $(shell $(WHEEL_PY) -c 'import os, ziglang; print(os.path.join(os.path.dirname(ziglang.__file__), "zig"))')
endif
ifneq ($(origin CC),command line)
CC      := $(CURDIR)/ci/zigcc.sh
endif
# libNAME.a of each -lNAME of a package: in its pkg-config libdir, else where
# the system's cc finds it (libzstd.pc says /usr/lib on Debian, the .a is in
# the multiarch folder)
static_lib = $(or $(abspath $(firstword $(wildcard $(shell pkg-config --variable=libdir $(1))/lib$(2).a \
               $(shell cc -print-file-name=lib$(2).a 2>/dev/null)))),$(error PORTABLE=1: no lib$(2).a \
               of $(1) (make deps installs the -dev packages)))
static_libs_of = $(foreach p,$(1),$(foreach l,$(patsubst -l%,%,$(shell pkg-config --libs-only-l $(p))),\
                   $(call static_lib,$(p),$(l))))
PORTABLE_DEPS := $(call static_libs_of,$(PKGS))
PORTABLE_CFLAGS := $(addprefix -idirafter ,$(sort $(foreach p,$(PKGS),$(shell pkg-config --variable=includedir $(p)))))
endif

# MPI (Open MPI), detected here once: with MPI=1 the sources see DCK_HAVE_MPI.
# libmpi is not linked: src/common/mpi_loader.c loads it with dlopen when a
# launcher started the process, so plain calls start without Open MPI's
# libraries. The rpath to mpicc's library folder lets dlopen find the libmpi
# built against where the loader's default path would not.
MPICC   ?= mpicc
ifeq ($(shell $(MPICC) --showme:link 2>/dev/null),)
MPI     ?= 0
else
MPI     ?= 1
endif
ifeq ($(MPI),1)
MPI_CFLAGS := $(shell $(MPICC) --showme:compile 2>/dev/null) -DDCK_HAVE_MPI=1
ifneq ($(PORTABLE),1)
MPI_LIBS   := $(foreach d,$(shell $(MPICC) --showme:libdirs 2>/dev/null),-Wl,-rpath,$(d)) -ldl
endif
endif

# -ffp-contract=off: no fused multiply-add behind our back, so the host
# arithmetic is the exact twin of the CUDA code built with --fmad=false.
CFLAGS  ?= -O2
# Same bits from any build: the flags that let the compiler change
# floating-point results are refused (src/common/common.h also refuses them
# with #error where the compiler says so, e.g. GCC's __ASSOCIATIVE_MATH__;
# clang defines no macro for most of them, hence this list), and
# -ffp-contract=off comes after the user's flags.
FAST_MATH_FLAGS := -ffast-math -Ofast -ffinite-math-only -fassociative-math -freciprocal-math \
                   -fno-signed-zeros -funsafe-math-optimizations -ffp-model=fast -fapprox-func
ifneq ($(filter $(FAST_MATH_FLAGS),$(CC) $(CFLAGS)),)
$(error detcheck must give the same bits from any build: remove $(filter $(FAST_MATH_FLAGS),$(CC) $(CFLAGS)) from CC/CFLAGS)
endif
override CFLAGS  += -std=c11 -Wall -Wextra -Werror -ffp-contract=off -fPIC -pthread \
           -D_GNU_SOURCE -Iinclude -Isrc $(shell pkg-config --cflags $(PKGS) 2>/dev/null) $(MPI_CFLAGS)
ifeq ($(PORTABLE),1)
# No debug info: zig cc writes it unless told (5 MB the packages need not
# ship), and its own runtime objects carry some (stripped at the link).
override CFLAGS  += $(PORTABLE_CFLAGS) -g0
override LDFLAGS += -Wl,--strip-debug
override LDLIBS  += $(PORTABLE_DEPS) -ldl -lpthread -lm
else
override LDLIBS  += $(shell pkg-config --libs $(PKGS) 2>/dev/null) $(MPI_LIBS) -ldl -lpthread -lm
endif
ifeq ($(SANITIZE),1)
override CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
override LDFLAGS += -fsanitize=address,undefined
endif
# Objects are rebuilt when the flags change (CFLAGS, SANITIZE, CUDA, MPI...):
# the stamp is rewritten only when its text differs, and every object
# depends on it.
FLAGS_STAMP := $(BUILD)/flags.txt
FLAGS_NOW = $(CC) $(CFLAGS) $(LIB_VISIBILITY) | $(NVCC) $(NVCCFLAGS) | $(LDFLAGS) $(LDLIBS)
# Header dependencies: every compile writes a .d file next to its output.
DEPFLAGS = -MMD -MP -MF $@.d -MT $@
# The library's objects: only DCK_API functions leave libdetcheck.so.
LIB_VISIBILITY := -fvisibility=hidden

# sm_80 (A100), sm_90 (H100, H200), sm_100 (B200), and PTX of the last for
# the GPUs after it (compiled by the driver at load).
CUDA_ARCHS ?= 80 90 100
NVCCFLAGS ?= -O2 --fmad=false -std=c++17 -Iinclude -Isrc -Xcompiler -fPIC \
             $(foreach a,$(CUDA_ARCHS),-gencode arch=compute_$(a)$(comma)code=sm_$(a)) \
             -gencode arch=compute_$(lastword $(CUDA_ARCHS))$(comma)code=compute_$(lastword $(CUDA_ARCHS))
# The device side of the same rule: the kernels are the CPU's exact twin
# only without contraction into FMA, with IEEE division and square root and
# with denormals kept. nvcc's fast-math flags are refused like -ffast-math
# above (both spellings: nvcc takes -use_fast_math and --use_fast_math,
# -ftz=true and --ftz=true...), and --fmad=false is appended after the
# user's NVCCFLAGS, so `make NVCCFLAGS=-O3` cannot drop it (nvcc accepts a
# repeated option and uses its last value).
NVCC_FAST_MATH_FLAGS := $(foreach f,use_fast_math ftz=true prec-div=false prec-sqrt=false \
                          fmad=true,-$(f) --$(f))
ifneq ($(filter $(NVCC_FAST_MATH_FLAGS),$(NVCC) $(NVCCFLAGS)),)
$(error detcheck must give the same bits from any build: remove $(filter $(NVCC_FAST_MATH_FLAGS),$(NVCC) $(NVCCFLAGS)) from NVCC/NVCCFLAGS)
endif
override NVCCFLAGS += --fmad=false
# CUDA: neither cudart nor NCCL is linked; src/gpu/cuda_loader.c loads them
# with dlopen on the first GPU call, so CPU calls start as fast as a CPU-only
# build. The kernels are compiled to a fatbin (device code only: no <<<>>>
# host stub, which would link cudart) and embedded in the library as data;
# the rpath lets dlopen find the toolkit's libraries. The GPU test programs
# call the runtime themselves and link it (GPU_LDLIBS).
ifeq ($(CUDA),1)
override CFLAGS  += -DDCK_HAVE_CUDA=1 -I$(CUDA_HOME)/include
ifneq ($(PORTABLE),1)
override LDLIBS  += -Wl,-rpath,$(CUDA_HOME)/lib64 -ldl
endif
GPU_LDLIBS := -L$(CUDA_HOME)/lib64 -lcudart
CU_SRC  := $(wildcard cuda/*.cu)
else
CU_SRC  :=
endif

ifneq ($(filter-out help clean deps,$(or $(MAKECMDGOALS),all)),)
$(shell mkdir -p $(BUILD) && { [ "$$(cat $(FLAGS_STAMP) 2>/dev/null)" = '$(FLAGS_NOW)' ] || echo '$(FLAGS_NOW)' > $(FLAGS_STAMP); })
endif

# src/cli/ (the command line) and src/report/ (its reports) make the
# binary; every other folder of src/ is libdetcheck.
LIB_SRC := $(filter-out src/cli/% src/report/%,$(wildcard src/*/*.c))
CLI_SRC := $(wildcard src/cli/*.c src/report/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(CU_SRC:%.cu=$(BUILD)/%.cu.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(wildcard tests/check_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_LIBS := $(shell pkg-config --libs check 2>/dev/null)
# tests/gpu/*.c need a GPU: never run by `make check`; ci/gpu-check.sh builds
# them with `make gpu-tests` and runs them on a machine that has one.
GPU_TEST_BIN := $(patsubst tests/gpu/%.c,$(BUILD)/tests/gpu/%,$(wildcard tests/gpu/*.c)) \
                $(BUILD)/tests/gpu/gpu_hash

.PHONY: portable wheel dist-tar sdist all lib check test tests-built gpu-tests demo bench fuzz fuzz-long install uninstall deps clean help

all: $(BUILD)/detcheck lib $(BUILD)/ldlibs.txt $(BUILD)/completion/detcheck.bash

# Shell completions, generated from the built binary's --help texts (the
# command table and each command's options): ci/completion.sh.
$(BUILD)/completion/detcheck.bash: $(BUILD)/detcheck ci/completion.sh
	sh ci/completion.sh $(BUILD)/detcheck $(BUILD)/completion

# What a program linking libdetcheck.a needs (used by the demo and benches).
$(BUILD)/ldlibs.txt: Makefile
	@mkdir -p $(BUILD)
	@echo '$(LDFLAGS) $(LDLIBS)' > $@

lib: $(BUILD)/libdetcheck.a $(BUILD)/$(SONAME) $(BUILD)/libdetcheck.so

$(BUILD)/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(OBJ_CFLAGS) $(DEPFLAGS) -c $< -o $@

$(filter-out %.cu.o,$(LIB_OBJ)): OBJ_CFLAGS := $(LIB_VISIBILITY)

# cuda/NAME.cu -> a fatbin -> an object holding it as the hidden symbol
# dck_cuda_NAME_fatbin (64-byte aligned, read-only), loaded by
# src/gpu/cuda_loader.c. The object keeps the name NAME.cu.o (ci/layers.py
# maps it to its source).
$(BUILD)/%.fatbin: %.cu $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) $(DEPFLAGS) -fatbin $< -o $@

$(BUILD)/%.cu.o: $(BUILD)/%.fatbin
	printf '\t.section .rodata.%s,"a"\n\t.balign 64\n\t.globl %s\n\t.hidden %s\n\t.type %s,@object\n%s:\n\t.incbin "%s"\n\t.size %s, .-%s\n\t.section .note.GNU-stack,"",@progbits\n' \
	  $(foreach i,1 2 3 4 5,$(SYM)) '$<' $(SYM) $(SYM) | $(CC) -c -x assembler - -o $@
$(BUILD)/%.cu.o: SYM = dck_cuda_$(notdir $*)_fatbin
.SECONDARY: $(CU_SRC:%.cu=$(BUILD)/%.fatbin)

$(BUILD)/libdetcheck.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

# src/libdetcheck.map: only dck_* leaves the library (with -fvisibility=hidden
# the same set; in the portable build it also keeps the static dependencies'
# symbols inside).
$(BUILD)/$(SHLIB): $(LIB_OBJ) src/libdetcheck.map
	$(CC) -shared -Wl,-soname,$(SONAME) -Wl,--version-script=src/libdetcheck.map -o $@ $(LIB_OBJ) $(LDFLAGS) $(LDLIBS)
ifeq ($(PORTABLE),1)
# (-z defs: a symbol left for the loader to find would be found nowhere)
$(BUILD)/$(SHLIB): override LDFLAGS += -Wl,-z,defs
# libjansson.a (Debian's, compiled for executables) reads libc's stdin with a
# PC32 relocation, which a shared library cannot hold (its own symbols' are
# made local by the version script). Only json_loadf reads it, to name its
# stream "<stdin>" in messages, and libdetcheck never calls json_loadf: the
# library links a copy in which that reference is to a hidden pointer of its
# own (NULL) instead.
JANSSON_A := $(filter %/libjansson.a,$(PORTABLE_DEPS))
$(BUILD)/deps/libjansson.a: $(JANSSON_A)
	@mkdir -p $(dir $@)
	objcopy --redefine-sym stdin=dck_jansson_stdin $< $@.tmp && mv $@.tmp $@
$(BUILD)/deps/jansson_stdin.o: $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	printf '\t.section .bss.%s,"aw",@nobits\n\t.balign 8\n\t.globl %s\n\t.hidden %s\n\t.type %s,@object\n%s:\n\t.zero 8\n\t.size %s, 8\n\t.section .note.GNU-stack,"",@progbits\n' \
	  $(foreach i,1 2 3 4 5 6,dck_jansson_stdin) | $(CC) -c -x assembler - -o $@
$(BUILD)/$(SHLIB): $(BUILD)/deps/libjansson.a $(BUILD)/deps/jansson_stdin.o
$(BUILD)/$(SHLIB): override LDLIBS := $(patsubst $(JANSSON_A),$(BUILD)/deps/jansson_stdin.o $(BUILD)/deps/libjansson.a,$(LDLIBS))
$(BUILD)/detcheck: override LDFLAGS += '-Wl,-rpath,$$ORIGIN/../lib'
endif

$(BUILD)/$(SONAME) $(BUILD)/libdetcheck.so: $(BUILD)/$(SHLIB)
	ln -sf $(SHLIB) $@

$(BUILD)/detcheck: $(CLI_OBJ) $(BUILD)/libdetcheck.a
	$(CC) -o $@ $(CLI_OBJ) $(BUILD)/libdetcheck.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(BUILD)/libdetcheck.a $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -Itests -o $@ $< $(BUILD)/libdetcheck.a $(LDFLAGS) $(TEST_LIBS) $(LDLIBS)

$(BUILD)/tests/gpu/%: tests/gpu/%.c $(BUILD)/libdetcheck.a $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -o $@ $< $(BUILD)/libdetcheck.a $(LDFLAGS) $(LDLIBS) $(GPU_LDLIBS)

$(BUILD)/tests/gpu/gpu_hash: examples/gpu_hash.c $(BUILD)/libdetcheck.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -o $@ $< $(BUILD)/libdetcheck.a $(LDFLAGS) $(LDLIBS) $(GPU_LDLIBS)

-include $(LIB_OBJ:=.d) $(CLI_OBJ:=.d) $(TEST_BIN:=.d) $(GPU_TEST_BIN:=.d) \
         $(CU_SRC:%.cu=$(BUILD)/%.fatbin.d)

# ---------------------------------------------------------------- packages
# The one way to the package installer: installs the Debian packages that are
# missing (apt-get; sudo when not root), silent when none is. The targets
# that need packages run `make` again after it, so that pkg-config and mpicc
# are asked once the packages are there.
deps:
	@sh ci/deps.sh

# ---------------------------------------------------------------- tests
# With CUDA the GPU test programs and the C example are built (not run) by
# make check too, so they cannot rot on machines without a GPU.
ifeq ($(CUDA),1)
CHECK_BUILDS := gpu-tests
endif

check: deps
	@$(MAKE) --no-print-directory all tests-built $(CHECK_BUILDS)
	@sh tests/run.sh $(BUILD)

# tests/html_canary_synth.c: a canary report of any size written through the
# CLI's report code (every CLI object but main's), for test_html_canary.sh.
# Not check_*: tests/run.sh runs it through that test, not as a suite.
SYNTH_BIN := $(BUILD)/tests/html_canary_synth
SYNTH_OBJ := $(filter-out $(BUILD)/src/cli/main.o,$(CLI_OBJ))
$(SYNTH_BIN): tests/html_canary_synth.c $(SYNTH_OBJ) $(BUILD)/libdetcheck.a $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(DEPFLAGS) -o $@ $< $(SYNTH_OBJ) $(BUILD)/libdetcheck.a $(LDFLAGS) $(LDLIBS)
-include $(SYNTH_BIN).d

tests-built: $(TEST_BIN) $(SYNTH_BIN)

test: check

gpu-tests: $(BUILD)/detcheck lib $(GPU_TEST_BIN)

# the wheel and the tarball as users install them (ci/package-check.sh: builds
# them with make wheel dist-tar; CI's first stage); the Debian 11 root's rows
# need root and skip without it
.PHONY: package-check
package-check: deps
	@sh ci/package-check.sh

# ---------------------------------------------------------------- demo, bench, fuzz
demo: deps
	@$(MAKE) --no-print-directory all
	@sh examples/demo.sh $(BUILD)

bench: deps
	@$(MAKE) --no-print-directory all
	@sh bench/run.sh $(BUILD)

fuzz: deps
	@sh tests/fuzz/run.sh

# every fuzz target for 10 minutes, inputs up to 1 MiB (not in CI)
fuzz-long: deps
	@FUZZ_SECONDS=$${FUZZ_SECONDS:-600} FUZZ_MAX_LEN=$${FUZZ_MAX_LEN:-1048576} sh tests/fuzz/run.sh

# ---------------------------------------------------------------- install
# detcheck.pc: what a program linking libdetcheck needs besides it. The
# portable library holds its dependencies (static): only a static link of
# libdetcheck.a needs them, by name, and no .pc of theirs.
ifeq ($(PORTABLE),1)
PC_REQUIRES :=
PC_LIBS_PRIVATE = $(shell pkg-config --libs $(PKGS) 2>/dev/null) -ldl -lpthread -lm
else
PC_REQUIRES := $(PKGS)
PC_LIBS_PRIVATE = $(filter-out $(shell pkg-config --libs $(PKGS) 2>/dev/null),$(LDLIBS))
endif
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man7
	install -m 755 $(BUILD)/detcheck $(DESTDIR)$(PREFIX)/bin/detcheck
	install -m 644 $(BUILD)/libdetcheck.a $(DESTDIR)$(PREFIX)/lib/libdetcheck.a
	install -m 755 $(BUILD)/$(SHLIB) $(DESTDIR)$(PREFIX)/lib/$(SHLIB)
	ln -sf $(SHLIB) $(DESTDIR)$(PREFIX)/lib/$(SONAME)
	ln -sf $(SHLIB) $(DESTDIR)$(PREFIX)/lib/libdetcheck.so
	install -m 644 include/detcheck.h include/detcheck_static.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 man/*.7 $(DESTDIR)$(PREFIX)/share/man/man7/
	install -d $(DESTDIR)$(PREFIX)/share/bash-completion/completions $(DESTDIR)$(PREFIX)/share/zsh/site-functions
	install -m 644 $(BUILD)/completion/detcheck.bash $(DESTDIR)$(PREFIX)/share/bash-completion/completions/detcheck
	install -m 644 $(BUILD)/completion/_detcheck $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_detcheck
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(VERSION)|g' \
	  -e 's|@REQUIRES@|$(PC_REQUIRES)|g' -e 's|@LIBS_PRIVATE@|$(PC_LIBS_PRIVATE)|g' \
	  detcheck.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/detcheck.pc

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/detcheck $(DESTDIR)$(PREFIX)/lib/libdetcheck.a \
	  $(DESTDIR)$(PREFIX)/lib/$(SHLIB) $(DESTDIR)$(PREFIX)/lib/$(SONAME) \
	  $(DESTDIR)$(PREFIX)/lib/libdetcheck.so $(DESTDIR)$(PREFIX)/include/detcheck.h \
	  $(DESTDIR)$(PREFIX)/include/detcheck_static.h $(DESTDIR)$(PREFIX)/lib/pkgconfig/detcheck.pc \
	  $(DESTDIR)$(PREFIX)/share/bash-completion/completions/detcheck $(DESTDIR)$(PREFIX)/share/zsh/site-functions/_detcheck
	cd man && for f in *.1; do rm -f $(DESTDIR)$(PREFIX)/share/man/man1/$$f; done
	cd man && for f in *.7; do rm -f $(DESTDIR)$(PREFIX)/share/man/man7/$$f; done

# ---------------------------------------------------------------- packages for users
# The portable build (PORTABLE=1 above) and the three packages made from it
# or from the sources, written into dist/ by ci/package.sh (atomically; it
# checks what each holds: the wheel's platform tag by auditwheel, the same
# detcheck binary in the wheel and the tarball).
PORTABLE_BUILD := $(if $(filter 1,$(PORTABLE)),$(BUILD),build-portable)
portable: deps
	@$(MAKE) --no-print-directory PORTABLE=1 BUILD=$(PORTABLE_BUILD) all

wheel: portable
	@sh ci/package.sh wheel $(PORTABLE_BUILD) $(VERSION)

dist-tar: portable
	@rm -rf $(PORTABLE_BUILD)/tar-root
	@$(MAKE) --no-print-directory -s PORTABLE=1 BUILD=$(PORTABLE_BUILD) install \
	  DESTDIR=$(CURDIR)/$(PORTABLE_BUILD)/tar-root PREFIX=/detcheck-$(VERSION)
	@sh ci/package.sh dist-tar $(PORTABLE_BUILD) $(VERSION)

sdist:
	@sh ci/package.sh sdist $(PORTABLE_BUILD) $(VERSION)

clean:
	rm -rf build build-san build-*

help:
	@echo 'Targets:'
	@echo '  all (default)  library (libdetcheck.a, $(SHLIB) + links) and CLI into BUILD'
	@echo '  lib            the libraries only'
	@echo '  check          installs missing packages (deps), builds, runs every test'
	@echo '  test           the same as check'
	@echo '  tests-built    builds the Check suites without running them'
	@echo '  gpu-tests      builds the GPU test programs (run by ci/gpu-check.sh)'
	@echo '  package-check  builds the wheel and tarball, checks them in fresh venvs and a Debian 11 root'
	@echo '  demo           installs missing packages, builds, runs the built-in example'
	@echo '  bench          installs missing packages, builds, runs the benchmarks'
	@echo '  fuzz           installs missing packages, runs the libFuzzer targets (clang)'
	@echo '  fuzz-long      every fuzz target for 10 minutes on inputs up to 1 MiB (not in CI)'
	@echo '  install        binary, libraries, headers, pkg-config file, man pages, completions'
	@echo '  uninstall      removes what install installed'
	@echo '  portable       installs missing packages, the portable build into build-portable (make'
	@echo '                 PORTABLE=1): zig cc for glibc 2.28, static zstd/xxHash/libyaml/zlib/jansson'
	@echo '  wheel          dist/detcheck-$(VERSION)-py3-none-manylinux_2_28_x86_64.whl from the portable'
	@echo '                 build: CLI on PATH, libdetcheck for the bindings, man pages, completions'
	@echo '  dist-tar       dist/detcheck-$(VERSION)-linux-x86_64.tar.gz: the portable build as bin/ lib/'
	@echo '                 include/ share/ (relative rpath, relocatable detcheck.pc)'
	@echo '  sdist          dist/detcheck-$(VERSION).tar.gz: the Python package with the C tree (pip builds it)'
	@echo '  deps           installs the missing Debian packages (silent when none is)'
	@echo '  clean          removes build, build-san and build-*'
	@echo '  help           this list'
	@echo 'Variables (current value in brackets):'
	@echo '  BUILD       build folder, one per parallel worker [$(BUILD)]'
	@echo '  SANITIZE    1: ASan + UBSan, BUILD then defaults to build-san [$(SANITIZE)]'
	@echo '  PORTABLE    1: the portable build, BUILD then defaults to build-portable [$(PORTABLE)]'
	@echo '  CUDA        0: no CUDA kernels; 1 by default when nvcc is found [$(CUDA)]'
	@echo '  NVCC        the CUDA compiler [$(NVCC)]'
	@echo '  CUDA_ARCHS  GPU architectures: SASS for each, PTX for the last [$(CUDA_ARCHS)]'
	@echo '  MPI         0: no MPI (one rank); 1 by default when $(MPICC) --showme works [$(MPI)]'
	@echo '  PREFIX      where install puts things [$(PREFIX)]'
	@echo '  DESTDIR     staging root for install [$(DESTDIR)]'
	@echo '  CC, CFLAGS, LDFLAGS, LDLIBS, NVCCFLAGS   as usual'
