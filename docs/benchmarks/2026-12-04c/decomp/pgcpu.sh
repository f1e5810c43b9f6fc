#!/bin/bash
# prints CPU ticks (user+sys, incl. reaped children) of all postgres processes
tot=0
for p in $(pgrep -u postgres); do
  s=$(cat /proc/$p/stat 2>/dev/null) || continue
  s=${s##*) }
  set -- $s
  # fields after comm: state=1 ... utime=12 stime=13 cutime=14 cstime=15
  tot=$((tot + ${12} + ${13} + ${14} + ${15}))
done
echo $tot
