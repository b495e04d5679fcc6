#!/bin/bash
# Device run (docs/gpu-training.md): corpus on all cores, then three concurrent trainings from INIT (default: the
# shipped weights): A continued pretraining; B + self-distillation from INIT with a light certainty term; C the same
# teacher rows with a heavier one. Each run's time budget is what is left before DEADLINE when it starts, so it ends
# decayed; a run that dies compiled is started again uncompiled; each is exported to $OUT.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 T=${T:-/tmp/es}
mkdir -p $T
DEV=${DEV:-cuda} PRE=${PRE:-mini} ROWS=${ROWS:-400000} BS=${BS:-256} LR=${LR:-1e-3}
N=${N:-10000} DB=${DB:-512} W=${W:-16} COMPILE=${COMPILE---compile} MIX=${MIX:-0.25,0.4,0.1,0.25}
INIT=${INIT:-model/checkpoints/default}  # the starting weights of A, B and C, and B and C's teacher
EV=${EV:-1000} DEADLINE=${DEADLINE:-545} MARGIN=${MARGIN:-60} CERT_B=${CERT_B:-0.15} CERT_C=${CERT_C:-0.4}
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
left() { python3 -c "print(max(0.2, ($DEADLINE - $(el) - $MARGIN) / 60))"; }  # minutes of training left
[ "$DEV" = cuda ] && { nvidia-smi -L; python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())" || exit 1; }
COMMON="--device $DEV --data $T/data --canvas-draft --preset $PRE --batch-size $BS --lr $LR --warmup 300 --eval-every $EV --optimizer muon --decay-frac 0.3 --init $INIT"
declare -A P ARGS
launch() {  # $1: run name, $2: compile flag, rest: its own arguments
  local r=$1 c=$2; shift 2
  ARGS[$r]="$*"
  python3 -m editserver.cli train --run $T/run$r $COMMON $c "$@" --time-budget $(left) >> $T/train$r.out 2>&1 &
  P[$r]=$!
  echo "$r started at +$(el)s ($c; budget $(left) min)"
}
# the corpus, then the teacher's rows, each built by a process of its own (--prepare-only), so every
# training's time budget counts from when it can start
python3 -m editserver.cli train --run $T/runA --data $T/data --edits .gpu/edits --prepare-only \
  --tokenizer model/checkpoints/default/tokenizer.json --source .gpu/extra-src --source-repeat 12 \
  --workers $W --rows $ROWS --seq-len 256 --mix $MIX > $T/corpus.out 2>&1 \
  || { echo "the corpus build failed"; tail -40 $T/corpus.out; exit 1; }
echo "corpus built at +$(el)s"; cat $T/data/train/info.json; echo
launch A "$COMPILE"
python3 -m editserver.cli train --run $T/runB --data $T/data --device $DEV --distill $N --distill-batch $DB \
  --teacher $INIT --prepare-only > $T/teacher.out 2>&1
echo "teacher rows at +$(el)s"; tail -2 $T/teacher.out; cat $T/runB/distill/info.json 2>/dev/null; echo
if [ -f $T/runB/distill/info.json ]; then
  mkdir -p $T/runC && cp -r $T/runB/distill $T/runC/distill
  launch B "$COMPILE" --distill $N --distill-share ${SHARE:-0.3} --certainty $CERT_B
  launch C "$COMPILE" --distill $N --distill-share ${SHARE:-0.3} --certainty $CERT_C
fi
finish() {  # $1: run name; export whatever checkpoint it saved
  tail -3 $T/train$1.out; tail -2 $T/run$1/train.log.jsonl 2>/dev/null
  python3 -m editserver.cli train --run $T/run$1 --export $T/out$1 > /dev/null \
    && cp $T/out$1/model.safetensors $OUT/model$1.safetensors && echo "exported $1 at +$(el)s"
}
declare -A RETRIED
while [ ${#P[@]} -gt 0 ]; do
  sleep 3
  for r in "${!P[@]}"; do
    if ! kill -0 ${P[$r]} 2>/dev/null; then
      wait ${P[$r]}; rc=$?; echo "$r exited $rc at +$(el)s"; unset "P[$r]"
      if [ $rc -ne 0 ] && [ -n "$COMPILE" ] && [ -z "${RETRIED[$r]:-}" ] && [ $(( DEADLINE - $(el) - MARGIN )) -gt 60 ]; then
        RETRIED[$r]=1; tail -15 $T/train$r.out
        # a resumed run counts its saved training time against the budget: add what it already spent
        spent=$(python3 -c "import torch,sys; p='$T/run$r/state.pt'; import os; print(torch.load(p,weights_only=False)['elapsed_s']/60 if os.path.exists(p) else 0)" 2>/dev/null || echo 0)
        a=${ARGS[$r]}; python3 -m editserver.cli train --run $T/run$r $COMMON $a \
          --time-budget $(python3 -c "print($spent + $(left))") >> $T/train$r.out 2>&1 &
        P[$r]=$!; echo "$r restarted uncompiled at +$(el)s (had spent $spent min)"
      else
        finish $r
      fi
    elif [ $(el) -ge $DEADLINE ]; then
      echo "deadline: stopping $r"; kill ${P[$r]}; wait ${P[$r]}; unset "P[$r]"; finish $r
    fi
  done
done
tar czf $OUT/text.tgz -C $T trainA.out trainB.out trainC.out runA/train.log.jsonl runB/train.log.jsonl \
  runC/train.log.jsonl outA/config.json data/train/info.json corpus.out teacher.out runB/distill/info.json 2>/dev/null
ls -la $OUT; echo "done at +$(el)s"
