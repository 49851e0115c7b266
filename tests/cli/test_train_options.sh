# train's options, as train, canary and resume-check parse them (the
# trainer's option table through the one option parser, cli_options.c):
# each form's exit status and first message line, word for word. Names
# in full: an abbreviation is an unknown option (a command's own options
# are not in the table, so it could not be told from one of them); a
# command's refused options are refused by name with every form of value.
# No training runs: the accepted forms show in the messages of later checks.
. "$DCK_TOP/tests/cli/lib.sh"

# EXIT | first line of stderr ('' none) | arguments (shell words)
while IFS='|' read -r want msg args; do
    [ -n "$want" ] || continue
    want=$(echo $want)
    msg=$(printf '%s' "$msg" | sed 's/^ //; s/ $//')
    eval "set -- $args"
    set +e
    "$DETCHECK" "$@" > out.txt 2> err.txt < /dev/null
    got=$?
    set -e
    line=$(head -n 1 err.txt)
    [ "$got" = "$want" ] && [ "$line" = "$msg" ] ||
        fail "detcheck$args: exit $got, '$line'; wanted exit $want, '$msg'"
    ok
done <<'EOF'
0 |  | train --help
0 | detcheck train: --steps needs a value | train -h --steps
2 | detcheck train: --steps needs a value | train --steps
2 | detcheck train: --steps '': not an integer in [0, 1000000000000] | train --steps=
2 | detcheck train: --steps 'x': not an integer in [0, 1000000000000] | train --steps x
2 | detcheck train: --steps 'x': not an integer in [0, 1000000000000] | train --steps=x
2 | detcheck train: --steps '--seed': not an integer in [0, 1000000000000] | train --steps --seed
2 | detcheck train: --steps '--': not an integer in [0, 1000000000000] | train --steps --
2 | detcheck train: unknown option '--ste' | train --ste 5
2 | detcheck train: unknown option '--ste=5' | train --ste=5
2 | detcheck train: compress takes no value | train --compress=3
2 | detcheck train: resume takes no value | train --resume=
2 | detcheck train: unknown option '--frobnicate=3' | train --frobnicate=3
2 | detcheck train: unknown option '--json=1' | train --json=1
2 | detcheck train: unexpected argument '-x' | train -x
2 | detcheck train: unexpected argument '-hq' | train -hq
2 | detcheck train: unexpected argument '-' | train -
2 | detcheck train: unexpected argument '--' | train --
2 | detcheck train: unexpected argument 'foo' | train --steps 3 foo
0 | detcheck train: unknown option '--bogus' | train --help --bogus
2 | detcheck train: unknown option '--bogus' | train --bogus --help
2 | detcheck train: --out needs a value | train --out
2 | detcheck train: --preset 'nope': use tiny, small or medium | train --preset nope
2 | detcheck train: --lr '99': not a number in [0, 10] | train --seed=0x10 --lr=99
2 | detcheck train: --device 'nope': use cpu, cuda, auto or twin | train --device=nope
2 | detcheck train: unknown option '--bench=1' | train --bench=1
0 |  | train --preset=small --width 7 --flip-bit 1:x:2:3 --help
2 | detcheck canary: --out: canary writes no checkpoint | canary --out x
2 | detcheck canary: --out: canary writes no checkpoint | canary --out=x
2 | detcheck canary: --out: canary writes no checkpoint | canary --out
2 | detcheck canary: --resume: canary writes no checkpoint, so there is nothing to resume | canary --resume=1
2 | detcheck canary: --bench: train's timing run; canary compares ranks | canary --bench=1
2 | detcheck canary: --compress: canary writes no checkpoint | canary --compress
2 | detcheck canary: unknown option '--ckpt' | canary --ckpt
2 | detcheck canary: unknown option '--t' | canary --t 5
2 | detcheck canary: --timeout needs a value | canary --timeout
2 | detcheck canary: --preset: unknown canary preset '' (tiny, cpu, gpu) | canary --preset=
2 | detcheck canary: --steps 0: canary runs 1 to 10000 steps (with none, nothing would be compared) | canary --steps=0
2 | detcheck canary: unexpected argument '--' | canary -- foo
2 | detcheck canary: --junit needs a file name ('-': standard output) | canary --junit=
2 | detcheck canary: --width needs a value | canary --width
2 | detcheck canary: --mode fast is not reproducible by design: canary runs the deterministic mode | canary --mode=fast
2 | detcheck resume-check: --out: resume-check sets each run's folder itself (in --workdir) | resume-check --out=x
2 | detcheck resume-check: --resume-from: resume-check resumes the interrupted runs itself | resume-check --resume-from
2 | detcheck resume-check: --kill-after-ckpt: resume-check stops the runs itself (--at K) | resume-check --kill-after-ckpt 3
2 | detcheck resume-check: --bench: train's timing run; resume-check compares trajectories | resume-check --bench=
2 | detcheck resume-check: --at '9': each K must be an integer in [1, 3] | resume-check --steps=4 --at=9
2 | detcheck resume-check: --at '9': each K must be an integer in [1, 3] | resume-check --steps 4 --at 9
2 | detcheck resume-check: --width 9 is not a multiple of --heads 2 | resume-check --steps 4 --at 2 --width=9 --heads 2
2 | detcheck resume-check: compress takes no value | resume-check --steps 4 --at 2 --compress=1
2 | detcheck resume-check: unknown option '--re' | resume-check --re 3
2 | detcheck resume-check: unknown option '--keep=1' | resume-check --keep=1
2 | detcheck resume-check: unexpected argument '-x' | resume-check -x
EOF
# a refused option is refused, never taken as train's, in every command's
# table: each name on the --help line "Train options not taken here:"
for cmd in canary resume-check; do
    for name in $("$DETCHECK" $cmd --help | sed -n 's/^Train options not taken here: *//p'); do
        expect_exit 2 "$DETCHECK" $cmd "$name=1"
        expect_grep "^detcheck $cmd: $name: " err.txt
    done
done
done_ok
