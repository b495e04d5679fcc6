#!/bin/bash
# Device run (docs/gpu-training.md): corpus on all cores, then three concurrent trainings from the shipped weights:
# A continued pretraining; B + self-distillation; C + distillation with certainty forcing
# (C reuses B's teacher rows). Each is exported to $OUT as soon as it ends.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 T=${T:-/tmp/es}
mkdir -p $T
DEV=${DEV:-cuda} PRE=${PRE:-mini} ROWS=${ROWS:-600000} BS=${BS:-256} LR=${LR:-1e-3}
TB=${TB:-6} TBD=${TBD:-5} N=${N:-20000} DB=${DB:-512} W=${W:-16} COMPILE=${COMPILE---compile}
EV=${EV:-500} DEADLINE=${DEADLINE:-540}
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
[ "$DEV" = cuda ] && { nvidia-smi -L; python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())" || exit 1; }
COMMON="--device $DEV --data $T/data --canvas-draft --preset $PRE --batch-size $BS --lr $LR --warmup 300 --eval-every $EV --optimizer muon --decay-frac 0.3 --init model/checkpoints/default $COMPILE"
python3 -m editserver.cli train --run $T/runA $COMMON --edits .gpu/edits \
  --tokenizer model/checkpoints/default/tokenizer.json --source .gpu/extra-src --source-repeat 12 \
  --workers $W --rows $ROWS --seq-len 256 --mix 0.3,0.4,0.1,0.2 --time-budget $TB > $T/trainA.out 2>&1 &
declare -A P=([A]=$!)
while [ ! -f $T/data/train/info.json ]; do
  sleep 2
  kill -0 ${P[A]} 2>/dev/null || { echo "A died before the corpus was built"; tail -40 $T/trainA.out; exit 1; }
done
echo "corpus built at +$(el)s"; cat $T/data/train/info.json; echo
python3 -m editserver.cli train --run $T/runB $COMMON --distill $N --distill-batch $DB \
  --distill-share ${SHARE:-0.3} --time-budget $TBD > $T/trainB.out 2>&1 &
P[B]=$!
while [ ! -f $T/runB/distill/info.json ] && kill -0 ${P[B]} 2>/dev/null; do sleep 2; done
echo "teacher rows at +$(el)s"; cat $T/runB/distill/info.json 2>/dev/null; echo
if [ -f $T/runB/distill/info.json ]; then
  mkdir -p $T/runC && cp -r $T/runB/distill $T/runC/distill
  python3 -m editserver.cli train --run $T/runC $COMMON --distill $N --distill-share ${SHARE:-0.3} \
    --certainty ${CERT:-0.5} --time-budget $TBD > $T/trainC.out 2>&1 &
  P[C]=$!
fi
finish() {  # $1: run name; export whatever checkpoint it saved
  tail -3 $T/train$1.out; tail -2 $T/run$1/train.log.jsonl 2>/dev/null
  python3 -m editserver.cli train --run $T/run$1 --export $T/out$1 > /dev/null \
    && cp $T/out$1/model.safetensors $OUT/model$1.safetensors && echo "exported $1 at +$(el)s"
}
while [ ${#P[@]} -gt 0 ]; do
  sleep 3
  for r in "${!P[@]}"; do
    if ! kill -0 ${P[$r]} 2>/dev/null; then
      wait ${P[$r]}; echo "$r exited $? at +$(el)s"; unset "P[$r]"; finish $r
    elif [ $(el) -ge $DEADLINE ]; then
      echo "deadline: stopping $r"; kill ${P[$r]}; wait ${P[$r]}; unset "P[$r]"; finish $r
    fi
  done
done
tar czf $OUT/text.tgz -C $T trainA.out trainB.out trainC.out runA/train.log.jsonl runB/train.log.jsonl \
  runC/train.log.jsonl outA/config.json data/train/info.json runB/distill/info.json 2>/dev/null
ls -la $OUT; echo "done at +$(el)s"
