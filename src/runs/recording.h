/* Recorded runs: the per-step tensor digests the Python Recorder writes
 * next to a trajectory (RUN/tensor_digests.bin), read for detcheck bisect.
 * The format (man detcheck-bisect(1), RECORDED RUNS; all integers
 * little-endian):
 *   header  "DCKTDIG\0" | u32 version (1) | u32 flags (0)
 *   records u8 type, then
 *     1 NAME  u32 id | u8 kind (0 gradient, 1 parameter, 2 optimizer state,
 *             3 state) | u16 length | name (UTF-8); ids count up from 0
 *     2 STEP  i64 step | u32 count | count x (u32 id | u64 high64 | u64 low64)
 * The header and the NAME records are the framing both recording files
 * share (framing.h). A torn last record (a killed run: one that runs to the
 * end of the file) is ignored; anything else malformed is an error naming
 * the file and the byte offset. Bounds (man detcheck-bisect(1), LIMITS): a name is UTF-8
 * without NUL bytes; a step lists each named tensor at most once, so its
 * count is at most the names recorded before it; memory follows the
 * records read, which the file's size bounds.
 * Kind 3, "state", is what a resume must restore besides the weights and
 * the optimizer: the batch (data.batch), RNG states (rng.*), learning rates
 * (lr.N), the GradScaler (scaler.*), EMA weights (ema.*), and on the first
 * step a process records the weights it started that step from (start.*).
 * It is optional information: a state name one run recorded and the other
 * did not is no differing tensor (start.* exists in one process's first
 * step), but it was not compared: dck_recording_state_only counts them. */
#ifndef DCK_RUNS_RECORDING_H
#define DCK_RUNS_RECORDING_H

#include "common/common.h"

#define DCK_RECORD_FILE "tensor_digests.bin"
#define DCK_RECORD_VERSION 1

typedef enum {
    DCK_REC_GRADIENT = 0,
    DCK_REC_PARAMETER,
    DCK_REC_OPTIMIZER,
    DCK_REC_STATE,
    DCK_REC_KIND_COUNT
} dck_rec_kind;

/* dck_rec_step, dck_rec_entry, dck_recording: detcheck_static.h (recorded runs) */

/* "gradient", "parameter", "optimizer state", "state". */
const char *dck_rec_kind_name(dck_rec_kind k);
/* Reads a side file, streamed (never whole): DCK_ERR_IO for a file that is
 * not regular (a FIFO would block), DCK_ERR_FORMAT naming path and byte
 * offset for bad input (magic, version, unknown or repeated ids, counts
 * past the names, names that are not UTF-8, steps out of order),
 * DCK_ERR_NOMEM naming path. */
dck_status dck_recording_load(const char *path, dck_recording *out);
/* The same reading of len bytes in memory (the fuzz target); label names
 * them in messages. */
dck_status dck_recording_parse(const char *label, const uint8_t *data, size_t len, dck_recording *out);
void dck_recording_release(dck_recording *r);

/* Where a kind comes within a step (dck_recording_compare's order): state
 * first (what the step started from), then gradients, parameters,
 * optimizer state. */
int dck_rec_kind_rank(int kind);
/* The first recorded step present in both whose tensors differ, and the
 * first tensor there: kind order (dck_rec_kind_rank), then model order
 * (dck_name_compare). A state entry present in one run only is passed
 * over (dck_recording_state_only counts them). Returns 1 and fills step, kind, name
 * (into a buffer of nlen) and how ("digest", "only in A", "only in B"); 0
 * when every common step agrees. DCK_ERR_NOMEM is reported as -1. */
int dck_recording_compare(const dck_recording *a, const dck_recording *b, long *step, int *kind,
                          char *name, size_t nlen, const char **how);
/* State entries (kind 3) one run recorded and the other did not, at the
 * steps both recorded: dck_recording_compare passes over them (state is
 * optional), so a caller that promises agreement names them as not
 * compared. Per run (A, B): how many, the steps of the first and the
 * last, and the first one's name. */
typedef struct {
    size_t count[2];
    long step[2], last[2]; /* the first and last step with one (-1: none) */
    const char *name[2];   /* the first one's, into the recording that holds it */
} dck_rec_state_only;
/* Fills u over every step in both; -1 when out of memory. */
int dck_recording_state_only(const dck_recording *a, const dck_recording *b, dck_rec_state_only *u);
/* The longest name a side file holds (its length field is 16 bits): a
 * buffer of DCK_REC_NAME_MAX + 1 takes every name whole. */
enum { DCK_REC_NAME_MAX = 65535 };
/* Steps recorded in both (for the report). */
size_t dck_recording_common_steps(const dck_recording *a, const dck_recording *b);

#endif
