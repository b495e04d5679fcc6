#!/bin/bash
# Device run (docs/gpu-training.md): corpora on all cores, then concurrent trainings from INIT (default: the
# shipped weights). RUNS names them, one per line: "NAME MIX [ARGS...]"; each distinct MIX gets a corpus of its
# own (built side by side, the workers shared out, or unpacked from a carried .gpu/corpus-<mix>.tar.xz built on
# the CPU machine beforehand, docs/gpu-training.md); a run whose ARGS hold --distill trains on the teacher's rows
# too (INIT answers N FIM contexts once, over the first distilling run's corpus, unless a carried
# .gpu/teacher-<mix>.tar.xz holds rows INIT answered: its teacher.sha256 names the weights). Each run's time budget is what
# is left before DEADLINE when it starts, plus what its saved state already spent, so a second call on the warm
# machine resumes every run and ends it decayed again; a run that dies compiled is started again uncompiled; each
# is exported to $OUT.
set -u
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 T=${T:-/tmp/es}
mkdir -p $T
DEV=${DEV:-cuda} PRE=${PRE:-mini} ROWS=${ROWS:-400000} BS=${BS:-256} LR=${LR:-1e-3}
N=${N:-10000} DB=${DB:-512} W=${W:-16} COMPILE=${COMPILE---compile} MIX=${MIX:-0.25,0.4,0.1,0.25}
INIT=${INIT:-model/checkpoints/default}  # the starting weights of every run, and the distilling runs' teacher
EV=${EV:-1000} DEADLINE=${DEADLINE:-545} MARGIN=${MARGIN:-60} CERT_B=${CERT_B:-0} DEC_C=${DEC_C:-0.3}
RUNS=${RUNS:-"A $MIX
B $MIX --distill $N --distill-share ${SHARE:-0.3} --certainty $CERT_B
C $MIX --distill $N --distill-share ${SHARE:-0.3} --decision-t-min $DEC_C"}
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
left() { python3 -c "print(max(0.2, ($DEADLINE - $(el) - $MARGIN) / 60))"; }  # minutes of training left
spent() {  # minutes of training run $1's saved state already counts (0 for a new run)
  python3 -c "import os, torch; p = '$T/run$1/state.pt'
print(torch.load(p, weights_only=False)['elapsed_s'] / 60 if os.path.exists(p) else 0)" 2>/dev/null || echo 0
}
[ "$DEV" = cuda ] && { nvidia-smi -L; python3 -c "import torch; print(torch.__version__, torch.cuda.get_device_name())" || exit 1; }
data() { echo $T/data-${1//,/_}; }  # a mix's corpus directory
unpack() {  # $1: a .tar.xz carried from the CPU machine, $2: the directory it is unpacked into
  mkdir -p "$2" && python3 -c "import sys, tarfile as t
t.open(sys.argv[1]).extractall(sys.argv[2], **({'filter': 'data'} if hasattr(t, 'data_filter') else {}))" "$1" "$2"
}
COMMON="--device $DEV --canvas-draft --preset $PRE --batch-size $BS --lr $LR --warmup 300 --eval-every $EV --optimizer muon --decay-frac 0.3 --init $INIT"
# the corpora, then the teacher's rows, each built by processes of their own (--prepare-only), so every
# training's time budget counts from when it can start; a corpus already built (a warm machine) is kept
MIXES=$(echo "$RUNS" | awk 'NF {print $2}' | sort -u)
for m in $MIXES; do  # a corpus built beforehand on the CPU machine, carried as .gpu/corpus-<mix>.tar.xz
  f=.gpu/corpus-${m//,/_}.tar.xz
  if [ ! -f $(data $m)/train/info.json ] && [ -f $f ]; then
    unpack $f $(data $m) && echo "corpus $m unpacked at +$(el)s"
  fi
done
NEW=$(for m in $MIXES; do [ -f $(data $m)/train/info.json ] || echo $m; done)
if [ -n "$NEW" ]; then
  w=$(( W / $(echo "$NEW" | wc -l) )); [ $w -ge 1 ] || w=1
  for m in $NEW; do
    python3 -m editserver.cli train --run $T/prep-$m --data $(data $m) --edits .gpu/edits --prepare-only \
      --tokenizer editserver/model/checkpoints/default/tokenizer.json --source .gpu/extra-src --source-repeat 12 \
      --workers $w --rows $ROWS --seq-len 256 --mix $m > $T/corpus-$m.out 2>&1 &
  done
  wait
  for m in $NEW; do
    [ -f $(data $m)/train/info.json ] || { echo "the corpus $m failed"; tail -40 $T/corpus-$m.out; exit 1; }
  done
  echo "corpora built at +$(el)s ($w workers each):" $NEW
fi
declare -A P ARGS MIXOF
launch() {  # $1: run name, $2: compile flag; ARGS[$1] holds its own arguments
  local r=$1 c=$2 b
  b=$(python3 -c "print($(spent $r) + $(left))")
  python3 -m editserver.cli train --run $T/run$r $COMMON $c ${ARGS[$r]} --time-budget $b < /dev/null >> $T/train$r.out 2>&1 &
  P[$r]=$!
  echo "$r started at +$(el)s ($c; budget $b min; ${ARGS[$r]})"
}
DISTILL=""
while read -r r m a; do
  [ -n "$r" ] || continue
  ARGS[$r]="--data $(data $m) $a"; MIXOF[$r]=$m
  case " $a " in *" --distill "*) DISTILL="$DISTILL $r" ;; *) launch $r "$COMPILE" ;; esac
done <<< "$RUNS"
if [ -n "$DISTILL" ]; then
  first=$(echo $DISTILL | cut -d' ' -f1)
  f=.gpu/teacher-${MIXOF[$first]//,/_}.tar.xz  # teacher rows built beforehand on the CPU machine
  if [ ! -f $T/run$first/distill/info.json ] && [ -f $f ]; then
    unpack $f $T/run$first/distill
    if [ "$(cat $T/run$first/distill/teacher.sha256 2>/dev/null)" = "$(sha256sum $INIT/model.safetensors | cut -d' ' -f1)" ]; then
      echo "teacher rows unpacked at +$(el)s"
    else
      echo "$f was answered by another teacher than $INIT: building them here"; rm -rf $T/run$first/distill
    fi
  fi
  if [ ! -f $T/run$first/distill/info.json ]; then
    python3 -m editserver.cli train --run $T/run$first ${ARGS[$first]} --device $DEV --distill-batch $DB \
      --teacher $INIT --prepare-only > $T/teacher.out 2>&1
    echo "teacher rows at +$(el)s"; tail -2 $T/teacher.out; cat $T/run$first/distill/info.json 2>/dev/null; echo
  fi
  if [ -f $T/run$first/distill/info.json ]; then
    for r in $DISTILL; do
      [ -d $T/run$r/distill ] || { mkdir -p $T/run$r && cp -r $T/run$first/distill $T/run$r/distill; }
      launch $r "$COMPILE"
    done
  fi
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
        launch $r ""
      else
        finish $r
      fi
    elif [ $(el) -ge $DEADLINE ]; then
      echo "deadline: stopping $r"; kill ${P[$r]}; wait ${P[$r]}; unset "P[$r]"; finish $r
    fi
  done
done
(cd $T && tar czf $OUT/text.tgz train*.out run*/train.log.jsonl data-*/train/info.json corpus-*.out teacher.out \
  run*/distill/info.json 2>/dev/null)
ls -la $OUT; echo "done at +$(el)s"
