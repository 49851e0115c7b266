# A real single-node Slurm cluster, started by this test on this machine:
# munged, slurmctld and slurmd (Debian's packages: ci/deps.sh) with a
# slurm.conf generated for this machine's CPUs (slurmd -C) and ports on
# localhost, in a temporary directory. Through it, `sbatch --wait` runs
# examples/slurm/canary.sbatch (4 tasks, srun --mpi=pmix detcheck canary) and
# examples/slurm/post-restart.sbatch (canary, resume-check, verify): both
# pass; with a fault injected into one task the job fails and its output
# names that task's host and rank. Every daemon is stopped at the end (trap),
# also on failure. Skips only when the Slurm or munge programs are absent.
. "$DCK_TOP/tests/cli/lib.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export ASAN_OPTIONS=detect_leaks=0

for p in munged slurmctld slurmd sbatch srun sinfo scontrol; do
    command -v $p > /dev/null || skip "no $p: Slurm or munge is not installed (make deps installs slurmctld, slurmd, slurm-client, munge)"
done
[ "$(id -u)" -eq 0 ] || skip "slurmd must run as root to start jobs as this user (CI runs as root)"
command -v python3 > /dev/null || skip "no python3 to find free ports"

# daemons' files under a short path: unix socket names are limited to 107 bytes
S=$(mktemp -d /tmp/dck-slurm.XXXXXX)
PIDS=""
cleanup() {
    for pid in $PIDS; do kill "$pid" 2> /dev/null || true; done
    for pid in $PIDS; do
        i=0
        while kill -0 "$pid" 2> /dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
        kill -9 "$pid" 2> /dev/null || true
    done
    rm -rf "$S"
}
trap cleanup EXIT
trap 'exit 1' INT TERM HUP
show_logs() { for f in "$S"/*.log; do echo "--- $f"; tail -n 30 "$f"; done; }

# ---- munge: its own key, socket and files
dd if=/dev/urandom of="$S/munge.key" bs=1024 count=1 2> /dev/null
chmod 400 "$S/munge.key"
mkdir -m 755 "$S/munge"
munged --force --foreground --key-file="$S/munge.key" --socket="$S/munge/munge.sock" \
    --pid-file="$S/munge/munged.pid" --log-file="$S/munged.log" --seed-file="$S/munge/seed" \
    > /dev/null 2>&1 &
PIDS="$PIDS $!"

# ---- slurm.conf for this machine
set -- $(python3 -c 'import socket
ss=[socket.socket() for _ in range(2)]
[s.bind(("127.0.0.1",0)) for s in ss]
print(*[s.getsockname()[1] for s in ss])')
CTLD_PORT=$1 SLURMD_PORT=$2
NODE=$(slurmd -C | head -n 1)          # NodeName=HOST CPUs=N Boards=... RealMemory=...
HOST=$(echo "$NODE" | sed -n 's/^NodeName=\([^ ]*\).*/\1/p')
NCPU=$(echo "$NODE" | sed -n 's/.* CPUs=\([0-9]*\).*/\1/p')
[ -n "$HOST" ] && [ -n "$NCPU" ] || fail "slurmd -C said '$NODE'"
mkdir -p "$S/state" "$S/spool"
cat > "$S/slurm.conf" << EOF
ClusterName=detcheck-test
SlurmctldHost=$HOST(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$S/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd.pid
SlurmctldLogFile=$S/slurmctld.log
SlurmdLogFile=$S/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
ReturnToService=2
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
$(echo "$NODE" | sed 's/ UpTime=.*//') NodeAddr=127.0.0.1 State=UNKNOWN
# OverSubscribe: the test submits every job at once, and they share the node
PartitionName=test Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE:8
EOF
export SLURM_CONF="$S/slurm.conf"

i=0
while [ ! -S "$S/munge/munge.sock" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
[ -S "$S/munge/munge.sock" ] || { show_logs; fail "munged did not start"; }
slurmctld -D -f "$SLURM_CONF" > "$S/slurmctld.out" 2>&1 &
PIDS="$PIDS $!"
slurmd -D -f "$SLURM_CONF" > "$S/slurmd.out" 2>&1 &
PIDS="$PIDS $!"
i=0
state=""
while [ $i -lt 150 ]; do
    state=$(sinfo -h -n "$HOST" -o %t 2> /dev/null || true)
    [ "$state" = idle ] && break
    sleep 0.2; i=$((i+1))
done
[ "$state" = idle ] || { show_logs; fail "the node never became idle (state '$state')"; }
ok

# the examples run as they are; what differs from a real cluster comes from
# the command line: 4 tasks on one node with fewer CPUs (--overcommit)
export DETCHECK
submit() { # NAME SCRIPT [VAR=VALUE...]: sbatch --wait in the background; NAME.out, NAME.rc
    name=$1 script=$2; shift 2
    ( set +e
      env "$@" timeout 150 sbatch --wait --nodes=1 --overcommit --chdir="$PWD" --job-name="$name" \
          --output="$PWD/$name.out" "$DCK_TOP/examples/slurm/$script" > "$name.submit" 2>&1
      echo $? > "$name.rc" ) &
    JOBS="$JOBS $!"
}
JOBS=""
rc_of() { [ -f "$1.rc" ] && cat "$1.rc" || echo none; }

# a checkpoint and its golden manifest for post-restart.sbatch to verify
$DETCHECK train -q --vocab 64 --width 32 --layers 2 --heads 4 --seq 16 --microbatches 4 \
    --steps 4 --out run > /dev/null
$DETCHECK hash -o golden.yaml run/step_00000004 2> /dev/null
cp -r run damaged
# one bit of the last tensor's data (the header is at the front)
shard=damaged/step_00000004/rank_00000_of_00001.safetensors
printf '\001' | dd of=$shard bs=1 seek=$(( $(wc -c < $shard) - 100 )) conv=notrunc 2> /dev/null
CK="DETCHECK_CHECKPOINT=$PWD/run/step_00000004 DETCHECK_GOLDEN=$PWD/golden.yaml"

# every job at once: the jobs queue up in Slurm, and sbatch --wait's polls overlap
submit canary canary.sbatch
submit canary_fault canary.sbatch DETCHECK_CANARY_ARGS="--inject 2:3:grad.blocks.1.mlp.fc.weight:11:7"
submit post post-restart.sbatch $CK
submit post_fault post-restart.sbatch $CK DETCHECK_CANARY_ARGS="--inject 1:5:activations:300:25"
submit post_damaged post-restart.sbatch DETCHECK_CHECKPOINT="$PWD/damaged/step_00000004" \
    DETCHECK_GOLDEN="$PWD/golden.yaml"
# srun without an MPI plugin: tasks that cannot reach each other are refused;
# detcheck canary run by the batch script itself is one rank
wrap() { # NAME COMMAND: a batch job of one command line
    name=$1; shift
    ( set +e
      timeout 150 sbatch --wait --nodes=1 --ntasks=2 --overcommit --chdir="$PWD" --job-name="$name" \
          --output="$PWD/$name.out" --wrap="$*" > "$name.submit" 2>&1
      echo $? > "$name.rc" ) &
    JOBS="$JOBS $!"
}
wrap nompi srun --mpi=none "$DETCHECK" canary
# a hung task (canary's testing hook) is named after --timeout; the step is
# ended, not waited for
submit stall canary.sbatch DETCHECK_CANARY_ARGS="--test-stall 3 --timeout 3"
wrap single "$DETCHECK" canary
for j in $JOBS; do wait "$j"; done  # not a bare wait: the daemons are children too

rc=$(rc_of nompi)
[ "$rc" = 2 ] || { cat nompi.submit nompi.out; fail "srun --mpi=none canary: exit $rc, wanted 2"; }; ok
expect_grep 'srun started 2 tasks, but they are not connected' nompi.out
rc=$(rc_of stall)
[ "$rc" = 2 ] || { cat stall.submit stall.out; fail "canary with a hung task: exit $rc, wanted 2"; }; ok
expect_grep '^? rank 3 ? TIMEOUT: no report within 3 s (dead or hung)$' stall.out
expect_grep '^3 of 4 devices identical$' stall.out
rc=$(rc_of single)
[ "$rc" = 0 ] || { cat single.submit single.out; fail "canary in the batch script: exit $rc"; }; ok
expect_grep '^1 of 1 devices identical$' single.out

# ---- canary.sbatch: 4 tasks, all identical
rc=$(rc_of canary)
[ "$rc" = 0 ] || { cat canary.submit canary.out; show_logs; fail "canary job: exit $rc"; }; ok
expect_grep 'detcheck canary: 4 ranks' canary.out
for r in 0 1 2 3; do expect_grep "^$HOST rank $r cpu:$r identical$" canary.out; done
expect_grep '^4 of 4 devices identical$' canary.out

# ---- one bit flipped in task 2's gradients at step 3: the job fails and names it
rc=$(rc_of canary_fault)
[ "$rc" = 1 ] || { cat canary_fault.submit canary_fault.out; fail "the job with a fault: exit $rc, wanted 1"; }; ok
expect_grep "^$HOST rank 2 cpu:2 DIFFERS at step 3: grad.blocks.1.mlp.fc.weight, 1 of 4096 elements differ, bits 0x00000080 (bit 7)" canary_fault.out
[ "$(grep -c DIFFERS canary_fault.out)" -eq 1 ] || { cat canary_fault.out; fail "more than one task named"; }; ok
expect_grep '^3 of 4 devices identical$' canary_fault.out

# ---- post-restart.sbatch: canary, resume-check, verify
rc=$(rc_of post)
[ "$rc" = 0 ] || { cat post.submit post.out; show_logs; fail "post-restart job: exit $rc"; }; ok
expect_grep '^4 of 4 devices identical$' post.out
expect_grep '== 2/3 resume-check' post.out
expect_grep '== 3/3 verify' post.out
expect_grep 'post-restart: all checks passed' post.out
# a fault on task 1 stops it at the canary, naming the host and rank
rc=$(rc_of post_fault)
[ "$rc" = 1 ] || { cat post_fault.submit post_fault.out; fail "post-restart with a fault: exit $rc, wanted 1"; }; ok
expect_grep "^$HOST rank 1 cpu:1 DIFFERS at step 5: " post_fault.out
expect_no_grep '== 2/3' post_fault.out
# a damaged checkpoint fails the last check
rc=$(rc_of post_damaged)
[ "$rc" = 1 ] || { cat post_damaged.submit post_damaged.out; fail "post-restart, damaged checkpoint: exit $rc, wanted 1"; }; ok
expect_grep '== 3/3 verify' post_damaged.out
expect_no_grep 'all checks passed' post_damaged.out
done_ok
