# detcheck: build, test, install.
#   make            library + CLI into $(BUILD)
#   make check      all tests (installs missing Debian packages first)
#   make check SANITIZE=1   the same under ASan + UBSan (in build-san/)
#   make demo       the main job on the built-in example
#   make bench      benchmarks against named peers
#   make fuzz       libFuzzer targets, 60 s each (clang)
#   make install    PREFIX=/usr/local DESTDIR=
#   make deps       install missing Debian packages
#   make CUDA=0     build without the CUDA kernels

PREFIX  ?= /usr/local
DESTDIR ?=
SANITIZE ?= 0
ifeq ($(SANITIZE),1)
BUILD   ?= build-san
else
BUILD   ?= build
endif

CC      ?= cc
NVCC    ?= $(shell command -v nvcc 2>/dev/null || ls /usr/local/cuda/bin/nvcc 2>/dev/null)
ifeq ($(NVCC),)
CUDA    ?= 0
else
CUDA    ?= 1
endif
CUDA_HOME ?= $(patsubst %/bin/nvcc,%,$(NVCC))

PKGS    := libxxhash libzstd yaml-0.1 jansson zlib
MPI_CFLAGS := $(shell mpicc --showme:compile 2>/dev/null)
MPI_LIBS   := $(shell mpicc --showme:link 2>/dev/null)

# -ffp-contract=off: no fused multiply-add behind our back, so the host
# arithmetic is the exact twin of the CUDA code built with --fmad=false.
CFLAGS  ?= -O2
CFLAGS  += -std=c11 -Wall -Wextra -Werror -ffp-contract=off -fPIC -pthread \
           -D_GNU_SOURCE -Iinclude -Isrc $(shell pkg-config --cflags $(PKGS) 2>/dev/null) $(MPI_CFLAGS)
LDLIBS  += $(shell pkg-config --libs $(PKGS) 2>/dev/null) $(MPI_LIBS) -lpthread -lm
ifeq ($(SANITIZE),1)
CFLAGS  += -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS += -fsanitize=address,undefined
endif

NVCCFLAGS ?= -O2 --fmad=false -std=c++17 -Iinclude -Isrc -Xcompiler -fPIC \
             -gencode arch=compute_90,code=sm_90 -gencode arch=compute_90,code=compute_90
ifeq ($(CUDA),1)
CFLAGS  += -DDCK_HAVE_CUDA=1 -I$(CUDA_HOME)/include
LDLIBS  += -L$(CUDA_HOME)/lib64 -Wl,-rpath,$(CUDA_HOME)/lib64 -lcudart -lnccl -lstdc++
CU_SRC  := $(wildcard cuda/*.cu)
else
CU_SRC  :=
endif

LIB_SRC := $(filter-out src/cli/%,$(wildcard src/*/*.c))
CLI_SRC := $(wildcard src/cli/*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/%.o) $(CU_SRC:%.cu=$(BUILD)/%.cu.o)
CLI_OBJ := $(CLI_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(wildcard tests/check_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
TEST_LIBS := $(shell pkg-config --libs check 2>/dev/null)

.PHONY: gpu-tests all lib check test unit-tests cli-tests demo bench fuzz install uninstall deps ensure-deps clean

all: $(BUILD)/detcheck $(BUILD)/libdetcheck.a $(BUILD)/libdetcheck.so $(BUILD)/ldlibs.txt

# What a program linking libdetcheck.a needs (used by the demo and benches).
$(BUILD)/ldlibs.txt: Makefile
	@mkdir -p $(BUILD)
	@echo '$(LDFLAGS) $(LDLIBS)' > $@

lib: $(BUILD)/libdetcheck.a $(BUILD)/libdetcheck.so

$(BUILD)/%.o: %.c $(wildcard include/*.h src/*/*.h)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/%.cu.o: %.cu $(wildcard include/*.h src/*/*.h cuda/*.cuh)
	@mkdir -p $(dir $@)
	$(NVCC) $(NVCCFLAGS) -c $< -o $@

$(BUILD)/libdetcheck.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/libdetcheck.so: $(LIB_OBJ)
	$(CC) -shared -o $@ $^ $(LDFLAGS) $(LDLIBS)

$(BUILD)/detcheck: $(CLI_OBJ) $(BUILD)/libdetcheck.a
	$(CC) -o $@ $(CLI_OBJ) $(BUILD)/libdetcheck.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests/%: tests/%.c $(wildcard tests/*.h) $(BUILD)/libdetcheck.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests -o $@ $< $(BUILD)/libdetcheck.a $(LDFLAGS) $(TEST_LIBS) $(LDLIBS)

# ---------------------------------------------------------------- tests
ensure-deps:
	@sh ci/deps.sh --if-missing

# With CUDA the GPU test programs and the C example are built (not run) by
# make check too, so they cannot rot on machines without a GPU.
ifeq ($(CUDA),1)
CHECK_BUILDS := gpu-tests
endif

check: ensure-deps
	@$(MAKE) --no-print-directory all tests-built $(CHECK_BUILDS)
	@sh tests/run.sh $(BUILD)

tests-built: $(TEST_BIN)

test: check

# ---------------------------------------------------------------- GPU-only programs
# tests/gpu/*.c need a GPU: never part of `make check`; ci/gpu-check.sh builds
# them with `make gpu-tests` and runs them on a machine that has one.
GPU_TEST_BIN := $(patsubst tests/gpu/%.c,$(BUILD)/tests/gpu/%,$(wildcard tests/gpu/*.c)) \
                $(BUILD)/tests/gpu/gpu_hash
gpu-tests: $(BUILD)/detcheck $(BUILD)/libdetcheck.so $(GPU_TEST_BIN)

$(BUILD)/tests/gpu/%: tests/gpu/%.c $(BUILD)/libdetcheck.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libdetcheck.a $(LDFLAGS) $(LDLIBS)

$(BUILD)/tests/gpu/gpu_hash: examples/gpu_hash.c $(BUILD)/libdetcheck.a
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -o $@ $< $(BUILD)/libdetcheck.a $(LDFLAGS) $(LDLIBS)

# ---------------------------------------------------------------- demo, bench, fuzz
demo: ensure-deps
	@$(MAKE) --no-print-directory all
	@sh examples/demo.sh $(BUILD)

bench: ensure-deps
	@$(MAKE) --no-print-directory all
	@sh bench/run.sh $(BUILD)

fuzz: ensure-deps
	@sh tests/fuzz/run.sh

# ---------------------------------------------------------------- install
install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib $(DESTDIR)$(PREFIX)/include \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/share/man/man1 $(DESTDIR)$(PREFIX)/share/man/man7
	install -m 755 $(BUILD)/detcheck $(DESTDIR)$(PREFIX)/bin/detcheck
	install -m 644 $(BUILD)/libdetcheck.a $(DESTDIR)$(PREFIX)/lib/libdetcheck.a
	install -m 755 $(BUILD)/libdetcheck.so $(DESTDIR)$(PREFIX)/lib/libdetcheck.so
	install -m 644 include/detcheck.h $(DESTDIR)$(PREFIX)/include/detcheck.h
	install -m 644 man/*.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 man/*.7 $(DESTDIR)$(PREFIX)/share/man/man7/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(shell sed -n 's/^#define DCK_VERSION_STRING "\(.*\)"/\1/p' include/detcheck.h)|g' \
	  -e 's|@REQUIRES@|$(PKGS)|g' -e 's|@LIBS_PRIVATE@|$(filter-out $(shell pkg-config --libs $(PKGS) 2>/dev/null),$(LDLIBS))|g' \
	  detcheck.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/detcheck.pc

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/bin/detcheck $(DESTDIR)$(PREFIX)/lib/libdetcheck.a \
	  $(DESTDIR)$(PREFIX)/lib/libdetcheck.so $(DESTDIR)$(PREFIX)/include/detcheck.h \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig/detcheck.pc
	cd man && for f in *.1; do rm -f $(DESTDIR)$(PREFIX)/share/man/man1/$$f; done
	cd man && for f in *.7; do rm -f $(DESTDIR)$(PREFIX)/share/man/man7/$$f; done

deps:
	@sh ci/deps.sh

clean:
	rm -rf build build-san build-*
