/* Traced steps: the per-module or per-op digests the Python Recorder
 * writes next to a trajectory (RUN/trace.bin, trace="modules" or "ops"),
 * read for detcheck bisect, which names the first event where two runs
 * part. The format (man detcheck-bisect(1), TRACE FILES; little-endian):
 *   header  "DCKTRAC\0" | u32 version (1 or 2) | u32 flags (0)
 *   records u8 type, then
 *     1 NAME  u32 id (counting up from 0) | u16 length | name (UTF-8)
 *     2 STEP  i64 step | u32 event count | u8 truncated (0 or 1) | events
 *   event   u8 phase (0 forward, 1 backward, 2 optimizer: version 2, ops
 *           only) | u8 kind (0 module, 1 op)
 *           | u32 module name id | u32 op name id (0xffffffff: a module
 *           event) | u32 call | u8 inputs | u8 outputs
 *           | (inputs + outputs) x (u8 present (0/1) | u64 high64 | u64 low64)
 * Version 2 (the Python Recorder's; detcheck-bisect(1), TRACE FILES): a module event's last
 * input is one digest over the module's parameters and buffers (absent when
 * it has none), so a module whose weights already differ is inherited, never
 * the culprit (a module event has at least that input); phase 2 holds the
 * ops run inside optimizer.step(), outputs of an op that writes its
 * arguments including the written arguments. Version 1 has neither.
 * The framing both recording files share (framing.h): the header is
 * checked before anything else; the file is streamed up to the size it had
 * when opened; only a record that runs to the end of the file is torn
 * (dropped; what it holds is still checked); anything else malformed is an
 * error naming the file and the byte offset. Bounds (LIMITS in the man
 * page): names UTF-8 without NUL, not empty, each recorded once; a step
 * holds at most DCK_TRACE_MAX_EVENTS events; memory follows the events
 * read, which the file's size bounds. */
#ifndef DCK_RUNS_TRACE_H
#define DCK_RUNS_TRACE_H

#include "common/common.h"

#define DCK_TRACE_FILE "trace.bin"
#define DCK_TRACE_VERSION 2     /* the newest this reads */
#define DCK_TRACE_MIN_VERSION 1 /* the oldest */
/* Events of one step: past this a count is damage, never a tear. 16 Mi
 * events of at least 16 bytes each: 256 MiB for one step of one run,
 * far past the op trace of a step of a billion-parameter model. */
#define DCK_TRACE_MAX_EVENTS (1u << 24)
/* The op name id of a module event. */
#define DCK_TRACE_NO_OP 0xffffffffu

typedef enum { DCK_TRACE_FORWARD = 0, DCK_TRACE_BACKWARD, DCK_TRACE_OPTIMIZER, DCK_TRACE_PHASE_COUNT } dck_trace_phase;
typedef enum { DCK_TRACE_MODULE = 0, DCK_TRACE_OP, DCK_TRACE_KIND_COUNT } dck_trace_kind;

/* dck_trace_slot, dck_trace_event, dck_trace_step, dck_trace: detcheck_static.h (recorded runs) */

/* "forward", "backward", "optimizer" */
const char *dck_trace_phase_name(int phase);
/* Whether input `input` of e is not a tensor the event was given but the
 * digest of its module's parameters and buffers (a version 2 module
 * event's last input). */
bool dck_trace_input_is_state(const dck_trace *t, const dck_trace_event *e, int input);
/* Reads a trace file, streamed (never whole): DCK_ERR_IO for a file that is
 * not regular (a FIFO would block), DCK_ERR_FORMAT naming path and byte
 * offset for bad input, DCK_ERR_NOMEM naming path. */
dck_status dck_trace_load(const char *path, dck_trace *out);
/* The same reading of len bytes in memory (the fuzz target); label names
 * them in messages. */
dck_status dck_trace_parse(const char *label, const uint8_t *data, size_t len, dck_trace *out);
void dck_trace_release(dck_trace *t);

/* dck_trace_how, dck_trace_diff: detcheck_static.h (recorded runs) */

/* Whether event a of ta and b of tb are the same as far as execution goes
 * (phase, kind, call, counts, names): names by their text, since each run
 * numbers its names in the order it met them. */
bool dck_trace_same_event(const dck_trace *ta, const dck_trace_event *a, const dck_trace *tb, const dck_trace_event *b);
/* Fills d; returns d->how != DCK_TRACE_AGREE. */
bool dck_trace_compare(const dck_trace *a, const dck_trace *b, dck_trace_diff *d);

#endif
