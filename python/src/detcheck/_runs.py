"""Recorded runs read and compared through libdetcheck: the tensor digests
(``tensor_digests.bin``) and traces (``trace.bin``) a Recorder or
``detcheck train`` wrote, by the readers ``detcheck bisect`` uses
(dck_recording_load, dck_trace_load) and the comparison it makes
(dck_trace_compare; formats: man detcheck-bisect(1), RECORDED RUNS and
TRACE FILES). So the package refuses what the command line refuses, with
its messages, and names the difference it names."""
import ctypes
import os
import struct

from . import _lib
from ._recorder import KINDS as _REC_KINDS, SIDE_FILE
from ._trace import KINDS as _TRACE_KINDS, NO_OP, PHASES, TRACE_FILE


def _layout(ctype, fmt):
    """A struct of the C library's as Python's struct module packs it: its
    fields (fmt, native layout), padded to its size."""
    size = ctypes.sizeof(ctype)
    packer = struct.Struct("@" + fmt + "x" * (size - struct.calcsize("@" + fmt)))
    assert packer.size == size, (ctype.__name__, fmt)
    return packer


_REC_ENTRY = _layout(_lib.RecEntry, "IQQ")
_REC_STEP = _layout(_lib.RecStep, "lNN")
_SLOT = _layout(_lib.TraceSlot, "BQQ")
_EVENT = _layout(_lib.TraceEvent, "BBBBIIIN")
_STEP = _layout(_lib.TraceStep, "l?NN")


def _rows(ptr, n, packer):
    """The n structs of a C array as tuples of their fields, unpacked at once."""
    return list(packer.iter_unpack(ctypes.string_at(ptr, n * packer.size))) if n else []


def _hex(hi, lo):
    return "%016x%016x" % (hi, lo)


def _load(load, path, out):
    """Calls a reader; its refusal as ValueError with the library's message."""
    st = load(os.fsencode(path), ctypes.byref(out))
    if st == _lib.ERR_NOMEM:
        raise MemoryError(_lib.last_error().decode("utf-8", "surrogateescape"))
    if st:
        raise ValueError(_lib.last_error().decode("utf-8", "surrogateescape"))


def read_digests(run_dir):
    """Reads a run's tensor_digests.bin: {step: [(kind, name, hex), ...]}
    in file order; kind is "gradient", "parameter", "optimizer" or "state"
    (the step's state entries: data.batch, rng.*, lr.N, scaler.*, ema.*,
    start.*).

    Refuses what ``detcheck bisect`` refuses, with its messages (the same
    reader: libdetcheck's dck_recording_load), raising ValueError naming
    the file and the byte offset: a missing or bad
    magic, another version or flags, an unknown record type, a name record whose id
    is not the next one or whose kind is unknown, a name that is not UTF-8
    or holds a NUL, a tensor (kind and name) named twice,
    a step not after the previous one, a step whose count exceeds the names
    recorded so far (a huge count is damage, not a torn record), that uses
    an id never named or lists one twice, a file that is not a regular file (a FIFO: opened
    without blocking); the file is streamed, never read whole. Only a record cut short by the
    end of the file (a killed run's torn last record) is ignored."""
    path = os.path.join(str(run_dir), SIDE_FILE)
    r = _lib.Recording()
    _load(_lib.recording_load, path, r)
    try:
        names = [(_REC_KINDS[r.kinds[i]], r.names[i].decode("utf-8")) for i in range(r.nnames)]
        entries = [names[i] + (_hex(hi, lo),) for i, hi, lo in _rows(r.entries, r.nentries, _REC_ENTRY)]
        return {st: entries[first:first + n] for st, n, first in _rows(r.steps, r.nsteps, _REC_STEP)}
    finally:
        _lib.recording_release(ctypes.byref(r))


class TraceEvent:
    """One event of a trace: ``phase`` ("forward"/"backward"/"optimizer"),
    ``kind`` ("module"/"op"), ``module`` (qualified name, "(root)",
    "(outside)", "(optimizer)"), ``op`` (an ATen overload name, or None for a
    module event), ``call``, ``inputs`` and ``outputs`` (lists of
    32-hex-digit digests, None for an absent slot), ``index`` (position in
    the step's event list), ``state_input`` (the index of the input that is
    the module's parameters and buffers: a version 2 module event's last;
    else None)."""
    __slots__ = ("index", "phase", "kind", "module", "op", "call", "inputs", "outputs", "state_input")

    def __init__(self, index, phase, kind, module, op, call, inputs, outputs, state_input=None):
        self.index, self.phase, self.kind, self.module, self.op = index, phase, kind, module, op
        self.call, self.inputs, self.outputs, self.state_input = call, inputs, outputs, state_input

    def key(self):
        """What identifies the event across runs, as ``detcheck bisect``
        matches events (dck_trace_compare): (phase, kind,
        module, op, call, input count, output count). Two events whose
        counts differ executed differently."""
        return (self.phase, self.kind, self.module, self.op, self.call, len(self.inputs), len(self.outputs))

    def __eq__(self, other):
        return isinstance(other, TraceEvent) and all(getattr(self, a) == getattr(other, a)
                                                     for a in self.__slots__)

    def __repr__(self):
        return "TraceEvent(%d, %s, %s %s%s call %d, %d inputs, %d outputs)" % (
            self.index, self.phase, self.kind, self.module, "" if self.op is None else " " + self.op,
            self.call, len(self.inputs), len(self.outputs))


class TraceStep:
    """A traced step: ``step``, ``truncated`` (the recorder's per-step bound
    dropped events past these), ``events`` (TraceEvent list)."""
    __slots__ = ("step", "truncated", "events")

    def __init__(self, step, truncated, events):
        self.step, self.truncated, self.events = step, truncated, events

    def __repr__(self):
        return "TraceStep(%d, %d events%s)" % (self.step, len(self.events),
                                               ", truncated" if self.truncated else "")


def read_trace(run_dir):
    """Reads a run's trace.bin: {step: TraceStep}.

    Refuses (ValueError naming the file and the byte offset) exactly what
    ``detcheck bisect`` refuses, with its messages (they are the same
    reader: libdetcheck's dck_trace_load): a missing or bad magic, a version other than 1 and 2, flags
    other than 0, an unknown record type; a name record whose id is not the
    next one, whose name is empty, holds a NUL or is not UTF-8, or (checked
    once the file is read) names a name already named; a step not after the
    previous one, holding more than 2^24 events, or whose truncated byte is
    not 0 or 1; an event with a phase past 1 (version 1) or 2 (version 2),
    a kind other than 0/1, a module or op name id not named before it, a
    module event with an op id other than 0xffffffff, in phase 2 (the
    optimizer's: ops only) or, in version 2, without inputs (its last is its
    parameters and buffers); a slot whose present byte is not 0 or 1, or an
    absent slot with a digest. Every field is checked as it is read, so only a record
    cut short by the end of the file (a killed run), with nothing wrong
    before the cut, is ignored. Also refused: a file that is not a regular
    file (a FIFO: never waited on). The file is streamed, never read whole."""
    path = os.path.join(str(run_dir), TRACE_FILE)
    t = _lib.Trace()
    _load(_lib.trace_load, path, t)
    try:
        names = [t.names[i].decode("utf-8") for i in range(t.nnames)]
        slots = [_hex(hi, lo) if pr else None for pr, hi, lo in _rows(t.slots, t.nslots, _SLOT)]
        events = _rows(t.events, t.nevents, _EVENT)
        state = t.version >= 2  # a module event's last input is its parameters and buffers
        out = {}
        for st, trunc, n, first in _rows(t.steps, t.nsteps, _STEP):
            evs = []
            for k in range(n):
                ph, kd, nin, nout, mid, oid, call, s = events[first + k]
                module = kd == 0
                evs.append(TraceEvent(k, PHASES[ph], _TRACE_KINDS[kd], names[mid], None if module else names[oid],
                                      call, slots[s:s + nin], slots[s + nin:s + nin + nout],
                                      nin - 1 if module and state else None))
            out[st] = TraceStep(st, bool(trunc), evs)
        return out
    finally:
        _lib.trace_release(ctypes.byref(t))


class TraceDifference(tuple):
    """Where two traces part: a 4-tuple ``(step, event_a, event_b,
    inputs_equal)`` with attributes ``step``, ``event`` (the position in the
    step, from 0), ``a`` and ``b`` (the events there, None where that run's
    step ended), ``how`` ("execution" or "output"), ``output`` (the first
    differing output's index, how "output" only, else None), ``input`` (the
    first input that differed already, None when every input is equal or
    how is "execution"), ``input_is_state`` (that input is the module's
    parameters and buffers), ``culprit`` (how "output" and every input
    equal) and ``inputs_equal`` (None for "execution")."""

    def __new__(cls, step, event, a, b, output=None, input=None):
        how = "execution" if output is None else "output"
        inputs_equal = None if output is None else input is None
        self = tuple.__new__(cls, (step, a, b, inputs_equal))
        self.step, self.event, self.a, self.b, self.how = step, event, a, b, how
        self.output, self.input, self.inputs_equal = output, input, inputs_equal
        self.input_is_state = input is not None and input == a.state_input
        self.culprit = how == "output" and input is None
        return self

    def __repr__(self):
        return "TraceDifference(step %d, event %d, %s, output %s, input %s: %r / %r)" % (
            self.step, self.event, self.how, self.output, self.input, self.a, self.b)


class _CTrace:
    """A trace ({step: TraceStep}) as the library's dck_trace, for
    dck_trace_compare: names numbered as met, steps ascending, each
    event's inputs then outputs in the slots. dck_trace_compare only asks
    whether two slots are equal, so a present slot holds, instead of its
    digest, the number of its hex string in ``digests`` (shared by the
    traces compared: equal strings, equal numbers), which saves parsing
    every digest."""

    def __init__(self, trace, digests):
        ids, names = {}, []

        def nid(nm):
            i = ids.get(nm)
            if i is None:
                i = ids[nm] = len(names)
                names.append(nm.encode("utf-8"))
            return i

        absent = _SLOT.pack(0, 0, 0)
        steps, events, slots = [], [], []
        nev = 0
        for st in sorted(trace):
            s = trace[st]
            steps.append(_STEP.pack(st, bool(s.truncated), len(s.events), nev))
            nev += len(s.events)
            for e in s.events:
                nin, nout = len(e.inputs), len(e.outputs)
                if nin > 255 or nout > 255:
                    raise ValueError("detcheck.first_difference: %r has more than 255 inputs or outputs" % (e,))
                module = e.kind == "module"
                events.append(_EVENT.pack(PHASES.index(e.phase), _TRACE_KINDS.index(e.kind), nin, nout,
                                          nid(e.module), NO_OP if module else nid(e.op), e.call, len(slots)))
                for h in (*e.inputs, *e.outputs):
                    if h is None:
                        slots.append(absent)
                        continue
                    b = digests.get(h)
                    if b is None:
                        b = digests[h] = _SLOT.pack(1, 0, len(digests) + 1)
                    slots.append(b)
        self.names = (ctypes.c_char_p * max(1, len(names)))(*names)
        self.steps = self._array(_lib.TraceStep, steps)
        self.events = self._array(_lib.TraceEvent, events)
        self.slots = self._array(_lib.TraceSlot, slots)
        self.c = _lib.Trace(2, len(names), self.names, len(steps), self.steps, len(events), self.events,
                            len(slots), self.slots)

    @staticmethod
    def _array(ctype, rows):
        data = b"".join(rows)
        arr = (ctype * max(1, len(rows)))()
        ctypes.memmove(arr, data, len(data))
        return arr


def first_difference(a, b):
    """The first difference of two traces ({step: TraceStep}, as
    :func:`read_trace` returns), as ``detcheck bisect`` finds it
    (libdetcheck's dck_trace_compare, called here): a :class:`TraceDifference`
    (a tuple ``(step, event_a, event_b, inputs_equal)``), or None when every
    step both traced agrees.

    In each step both traced, ascending, events are compared position by
    position in the order the file holds them (execution order). Where their
    keys (:meth:`TraceEvent.key`: phase, kind, module, op, call, input and
    output counts) differ, or one run's step ends while the other's goes on,
    the runs executed differently: ``inputs_equal`` is None and the missing
    event is None. A step the recorder truncated never ends early (its
    events past the count are unknown): where the truncated run's step ends
    first, only the events both hold are compared; a step that ends first
    without being truncated is a difference even when the other run's step
    is truncated. Otherwise the first event one of whose outputs differs
    (presence or digest) is returned, with the first differing output,
    ``inputs_equal`` True when every input is equal (this event computed
    other bits: the culprit) and False when an input already differed
    (inherited: ``input`` names the first such input). A step both traced
    where no event's output has a digest in either trace (all absent: the
    recorder could not digest them) compared nothing: ValueError, as
    ``detcheck bisect`` refuses it."""
    digests = {}
    ca, cb = _CTrace(a, digests), _CTrace(b, digests)
    d = _lib.TraceDiff()
    found = _lib.trace_compare(ctypes.byref(ca.c), ctypes.byref(cb.c), ctypes.byref(d))
    if d.blind:  # as bisect: outputs absent in both runs are no evidence of agreement
        raise ValueError("detcheck.first_difference: step %d (and %d more) traced in both, but none of its events' "
                         "outputs has a digest in either: nothing was compared there" % (d.first_blind, d.blind - 1))
    if not found:
        return None
    xa, xb = a[d.step].events, b[d.step].events
    x = xa[d.event] if d.a else None
    y = xb[d.event] if d.b else None
    if d.how == _lib.TRACE_OUTPUT:
        return TraceDifference(d.step, d.event, x, y, d.output, None if d.input < 0 else d.input)
    return TraceDifference(d.step, d.event, x, y)


_NEXT = (None, "trace ops", "dump step")


def _text(b):
    return None if b is None else b.decode("utf-8", "surrogateescape")


def _event(e):
    if not e.present:
        return None
    return {"phase": PHASES[e.phase] if 0 <= e.phase < len(PHASES) else e.phase,
            "kind": _TRACE_KINDS[e.kind] if 0 <= e.kind < len(_TRACE_KINDS) else e.kind,
            "module": _text(e.module), "op": _text(e.op), "call": e.call,
            "inputs": e.nin, "outputs": e.nout}


class RunsComparison:
    """What ``detcheck.compare_runs`` found: libdetcheck's dck_runs_compare,
    the comparison ``detcheck bisect`` and ``detcheck repro`` make (man
    detcheck-bisect(1)), as plain Python values.

    ``different`` is bisect's exit 1: a difference was found, or something
    one run holds and the other lacks was not compared (``not_compared``)
    and not accepted. ``same`` is its negation: True only with evidence,
    never for what was set aside. ``first_step`` and ``first_differing``
    ("trajectory", "tensor" or "event") name the earliest difference;
    ``trajectory``, ``tensor``, ``event`` and ``checkpoints`` say what each
    source found; ``next`` what would localise further (None, "trace ops",
    or ("dump step", K))."""

    def __init__(self, r):
        self.different = bool(r.different)
        self.same = not self.different
        self.found = bool(r.found)
        self.accepted = bool(r.accepted)
        self.last_steps = (r.last_step[0], r.last_step[1])
        self.first_step = r.first_step if r.first_differing else None
        self.first_differing = _text(r.first_differing)
        self.trajectory = {"step": r.traj_step, "detail": _text(r.traj_detail)} if r.traj_differs else None
        self.tensor = None
        if r.rec_found:
            kind = _REC_KINDS[r.rec_kind] if 0 <= r.rec_kind < len(_REC_KINDS) else r.rec_kind
            self.tensor = {"step": r.rec_step, "kind": kind, "name": _text(r.rec_name), "how": _text(r.rec_how)}
        self.recorded = {"a": bool(r.rec_has[0]), "b": bool(r.rec_has[1]), "steps_in_both": r.rec_common}
        t = r.trace
        self.traced = {"a": bool(t.has[0]), "b": bool(t.has[1]), "steps_in_both": t.common}
        self.event = None
        if t.found:
            self.event = {"step": t.step, "index": t.event,
                          "how": ("agree", "output", "execution")[t.how] if 0 <= t.how < 3 else t.how,
                          "output": t.output if t.output >= 0 else None,
                          "input": t.input if t.input >= 0 else None,
                          "input_is_state": bool(t.input_is_state),
                          "culprit": t.how == 1 and t.input < 0 and not t.late,
                          "context": bool(t.late), "a": _event(t.a), "b": _event(t.b)}
        nxt = _NEXT[t.next] if 0 <= t.next < len(_NEXT) else None
        self.next = ("dump step", t.next_step) if nxt == "dump step" else nxt
        diff = [(_text(r.ckpt_diff.entries[i].name), _lib.CMP_KINDS[r.ckpt_diff.entries[i].kind])
                for i in range(r.ckpt_diff.n)] if r.ckpt_diff.n else []
        self.checkpoints = {"a": r.ckpts[0], "b": r.ckpts[1], "in_both": r.ckpts_in_both,
                            "last_agreeing": r.ckpt_agree if r.ckpt_agree >= 0 else None,
                            "first_differing": r.ckpt_differ if r.ckpt_differ >= 0 else None,
                            "differing_tensors": diff}
        self.not_compared = [{"item": _text(g.item), "run": "AB"[g.run], "count": g.count,
                              "first": g.first, "last": g.last, "empty_side": bool(g.empty_side),
                              "why": _text(g.why), "name": _text(g.name)}
                             for g in r.gaps[:r.ngaps]]

    def __repr__(self):
        if self.same:
            return "RunsComparison(same, %d not compared)" % len(self.not_compared)
        return "RunsComparison(different: first %s at step %s, %d not compared)" % (
            self.first_differing, self.first_step, len(self.not_compared))


def _open_run(run_dir):
    h = ctypes.c_void_p()
    st = _lib.run_open(os.fsencode(str(run_dir)), ctypes.byref(h))
    if st:
        msg = _lib.last_error().decode("utf-8", "surrogateescape")
        raise MemoryError(msg) if st == _lib.ERR_NOMEM else ValueError(msg)
    return h


def compare_runs(a, b, allow_partial=False):
    """Compares two recorded run directories (trajectory.jsonl, and where
    recorded tensor_digests.bin, trace.bin and checkpoints) as ``detcheck
    bisect A B`` does, in process, through libdetcheck: a RunsComparison.
    allow_partial accepts what one run holds and the other lacks (bisect's
    --allow-partial; still listed in not_compared; an empty side is never
    accepted). A run the command line refuses (a malformed file, a
    trajectory with a missing step, runs without a step in common) raises
    ValueError with the command's message naming the file."""
    ha = _open_run(a)
    try:
        hb = _open_run(b)
        try:
            r = _lib.RunsResult()
            opts = _lib.RunsOpts(bool(allow_partial))
            st = _lib.runs_compare(ha, hb, ctypes.byref(opts), ctypes.byref(r))
            try:
                if st:
                    msg = _lib.last_error().decode("utf-8", "surrogateescape")
                    raise MemoryError(msg) if st == _lib.ERR_NOMEM else ValueError(msg)
                return RunsComparison(r)
            finally:
                _lib.runs_result_release(ctypes.byref(r))
        finally:
            _lib.run_free(hb)
    finally:
        _lib.run_free(ha)
