# A one-machine Slurm cluster for the slurm tests, sourced by each test script: installs
# Debian's slurm-wlm and munge when missing, writes a slurm.conf whose every path (state,
# spool, pid, log, munge socket and key) is in a fresh temporary folder, starts munged,
# slurmctld and slurmd in the foreground as children of the test, waits until the node is idle,
# and stops them all (and every job process) when the test exits, however it exits.
# Not a cluster for anything else: one node, no accounting, no cgroups.
#
# Use:  source tests/slurm/cluster.sh; dz_slurm_start [CPUS]; ...; (cleanup is automatic)
# A test that cannot get a cluster exits 77 (ctest SKIP_RETURN_CODE) with the reason, except
# under CI=true, where that is a failure (exit 1).

dz_slurm_skip() {
  if [[ "${CI:-}" == "true" ]]; then
    echo "slurm test: cannot run under CI=true: $*" >&2
    exit 1
  fi
  echo "slurm test skipped: $*" >&2
  exit 77
}

dz_slurm_install() {
  local missing=()
  for b in slurmctld slurmd sbatch munged; do
    command -v "$b" >/dev/null 2>&1 || command -v "/usr/sbin/$b" >/dev/null 2>&1 || missing+=("$b")
  done
  ((${#missing[@]} == 0)) && return 0
  [[ $(id -u) -eq 0 ]] || dz_slurm_skip "${missing[*]} not installed and not root to install slurm-wlm and munge"
  echo "slurm test: installing slurm-wlm and munge (missing: ${missing[*]})" >&2
  # No daemon may start from the package scripts: the test starts its own.
  local policy=/usr/sbin/policy-rc.d made_policy=0
  if [[ ! -e $policy ]]; then printf '#!/bin/sh\nexit 101\n' > $policy && chmod +x $policy && made_policy=1; fi
  local rc=0
  { DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
      -o DPkg::Lock::Timeout=300 slurm-wlm munge >/dev/null ||
    { apt-get update -qq -o DPkg::Lock::Timeout=300 &&
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        -o DPkg::Lock::Timeout=300 slurm-wlm munge >/dev/null; }; } || rc=$?
  ((made_policy)) && rm -f $policy
  ((rc == 0)) || dz_slurm_skip "apt-get install slurm-wlm munge failed (exit $rc)"
}

dz_free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

# Kills, by pid, every process whose environment carries this cluster's SLURM_CONF (the
# daemons, slurmstepd and the jobs' processes), then removes the folder unless kept.
dz_slurm_reap() {
  local conf="$1" dir="$2" self="$$" pids=() p
  for p in /proc/[0-9]*; do
    p=${p#/proc/}
    [[ $p == "$self" || $p == "$BASHPID" ]] && continue
    if { tr '\0' '\n' < /proc/$p/environ; } 2>/dev/null | grep -qxF "SLURM_CONF=$conf"; then pids+=("$p"); fi
  done
  ((${#pids[@]})) && kill -TERM "${pids[@]}" 2>/dev/null
  for _ in 1 2 3 4 5 6 7 8 9 10; do
    local alive=()
    for p in "${pids[@]}"; do [[ -d /proc/$p ]] && alive+=("$p"); done
    ((${#alive[@]} == 0)) && break
    sleep 0.3
  done
  for p in "${pids[@]}"; do [[ -d /proc/$p ]] && kill -KILL "$p" 2>/dev/null; done
  [[ -n "${DZ_SLURM_KEEP:-}" ]] || rm -rf "$dir"
}

dz_slurm_stop() {
  [[ -n "${DZ_SLURM_DIR:-}" ]] || return 0
  if [[ -n "${DZ_SLURM_FAILED_LOGS:-}" ]]; then
    echo "--- slurmctld.log (tail)" >&2; tail -n 20 "$DZ_SLURM_DIR/slurmctld.log" >&2 2>/dev/null
    echo "--- slurmd.log (tail)" >&2; tail -n 20 "$DZ_SLURM_DIR/slurmd.log" >&2 2>/dev/null
  fi
  scancel --full $(squeue -h -o %i 2>/dev/null) >/dev/null 2>&1 || true
  dz_slurm_reap "$SLURM_CONF" "$DZ_SLURM_DIR"
  [[ -n "${DZ_SLURM_WATCHER:-}" ]] && kill "$DZ_SLURM_WATCHER" 2>/dev/null
  DZ_SLURM_DIR=""
}

# dz_slurm_start [CPUS]: CPUs the node declares (default 16; config_overrides lets it declare
# more than the machine has, so 4-rank jobs fit on 2 cores).
dz_slurm_start() {
  local cpus="${1:-16}"
  dz_slurm_install
  export PATH="$PATH:/usr/sbin"
  DZ_SLURM_DIR="$(mktemp -d /tmp/dz-slurm.XXXXXX)"
  local d="$DZ_SLURM_DIR" host
  host="$(hostname -s)"
  mkdir -p "$d/state" "$d/spool" "$d/munge"
  chmod 700 "$d/munge"
  head -c 1024 /dev/urandom > "$d/munge/munge.key"
  chmod 400 "$d/munge/munge.key"
  local ctld_port slurmd_port
  ctld_port="$(dz_free_port)"; slurmd_port="$(dz_free_port)"
  cat > "$d/slurm.conf" <<CONF
ClusterName=dayzero-test
SlurmctldHost=$host
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$d/munge/munge.socket
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/slurmctld.pid
SlurmdPidFile=$d/slurmd.pid
SlurmctldLogFile=$d/slurmctld.log
SlurmdLogFile=$d/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
KillWait=3
InactiveLimit=0
MinJobAge=600
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
JobAcctGatherType=jobacct_gather/none
NodeName=$host CPUs=$cpus State=UNKNOWN
PartitionName=test Nodes=$host Default=YES MaxTime=INFINITE State=UP
CONF
  export SLURM_CONF="$d/slurm.conf"
  trap dz_slurm_stop EXIT
  trap 'exit 143' TERM INT
  # If the test is killed outright (a ctest timeout), a watcher in its own session reaps the
  # cluster: it polls the test's pid and carries no SLURM_CONF itself.
  local test_pid=$$
  DZ_SLURM_WATCHER=$(env -u SLURM_CONF setsid bash -c "
    while kill -0 $test_pid 2>/dev/null; do sleep 1; done
    $(declare -f dz_slurm_reap)
    dz_slurm_reap '$SLURM_CONF' '$d'" >/dev/null 2>&1 & echo $!)
  munged -F --force --socket="$d/munge/munge.socket" --key-file="$d/munge/munge.key" \
    --pid-file="$d/munge/munged.pid" --log-file="$d/munge/munged.log" \
    --seed-file="$d/munge/munged.seed" >/dev/null 2>&1 &
  for _ in $(seq 50); do [[ -S "$d/munge/munge.socket" ]] && break; sleep 0.1; done
  [[ -S "$d/munge/munge.socket" ]] || { cat "$d/munge/munged.log" >&2; dz_slurm_skip "munged did not start"; }
  slurmctld -D -i -f "$SLURM_CONF" >"$d/slurmctld.out" 2>&1 &
  slurmd -D -f "$SLURM_CONF" >"$d/slurmd.out" 2>&1 &
  local state=""
  for _ in $(seq 100); do
    state="$(sinfo -h -N -o %T -n "$host" 2>/dev/null | head -1)"
    [[ "$state" == idle ]] && break
    sleep 0.2
  done
  if [[ "$state" != idle ]]; then
    tail -n 30 "$d/slurmctld.log" "$d/slurmd.log" "$d"/*.out >&2 2>/dev/null
    dz_slurm_skip "the node did not become idle (sinfo state: '${state:-none}')"
  fi
  echo "slurm test: cluster up in $d (node $host idle, $cpus CPUs declared)" >&2
}

# dz_slurm_wait JOBID [TIMEOUT_S]: waits (polling every 0.3 s; sbatch --wait polls far slower)
# until the job has ended; prints its state and returns its exit code (124 on timeout).
dz_slurm_wait() {
  local id="$1" limit="${2:-120}" t0=$SECONDS info state code
  while :; do
    info="$(scontrol -o show job "$id" 2>/dev/null || true)"
    state="$(sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' <<< "$info")"
    case "$state" in
      COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|PREEMPTED|BOOT_FAIL|DEADLINE) break ;;
    esac
    if ((SECONDS - t0 > limit)); then echo "job $id still ${state:-unknown} after ${limit}s" >&2; return 124; fi
    sleep 0.3
  done
  code="$(sed -n 's/.* ExitCode=\([0-9]*\):\([0-9]*\).*/\1/p' <<< "$info")"
  echo "job $id: $state, exit ${code:-?}" >&2
  return "${code:-1}"
}
