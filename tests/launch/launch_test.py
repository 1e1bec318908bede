#!/usr/bin/env python3
"""Tests of launch/dayzero-launch without a cluster: the exact mpirun command of a 16-node x
8-GPU dry run, each start-up failure it detects (PMI mismatch under srun, ranks per node not
matching GPUs per node, a run folder only one node sees), and a real one-node launch that records
the command, environment, hosts and versions. Fake srun/ompi_info on PATH stand in for a Slurm
whose plugins do not match; the real-Slurm tests are tests/slurm/.
Usage: launch_test.py DAYZERO_BIN
"""
import json
import os
import shlex
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
LAUNCH = os.path.join(ROOT, "launch", "dayzero-launch")
DAYZERO = None


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "NCCL_", "OMPI_MCA_", "DAYZERO_", "OPENBLAS_", "OMP_"))}
    env.update(extra)
    return env


def launch(args, env=None, cwd=None):
    return subprocess.run([sys.executable, LAUNCH] + args, capture_output=True, text=True,
                          env=env or clean_env(), cwd=cwd, timeout=120)


class DryRun(unittest.TestCase):
    def test_16_nodes_8_gpus_exact_mpirun_command(self):
        with tempfile.TemporaryDirectory() as d:
            r = launch(["--hosts", "gpu[001-016]", "--gpus-per-node", "8", "--threads", "12",
                        "--run-dir", d + "/runs/{config}-{jobid}", "--assume-shared-fs",
                        "--bin", "/opt/dayzero/bin/dayzero", "--dry-run", "configs/k2.yaml"],
                       env=clean_env(SLURM_JOB_ID="4242"))
            self.assertEqual(r.returncode, 0, r.stderr)
            hosts = ",".join(f"gpu{i:03d}:8" for i in range(1, 17))
            root = " --allow-run-as-root" if os.geteuid() == 0 else ""
            expected = (f"mpirun -np 128{root} --host {hosts} --map-by ppr:8:node --bind-to numa --report-bindings "
                        "--mca btl '^openib' --mca oob_tcp_keepalive_time 10 --mca oob_tcp_keepalive_intvl 2 "
                        "--mca oob_tcp_keepalive_probes 5 -x DAYZERO_THREADS=12 -x NCCL_DEBUG=WARN "
                        "-x 'NCCL_SOCKET_IFNAME=^lo,docker' -x OMP_NUM_THREADS=12 -x OPENBLAS_NUM_THREADS=12 "
                        f"/opt/dayzero/bin/dayzero run configs/k2.yaml --dump-dir {d}/runs/k2-4242")
            # The job id names the folder; hosts given with --hosts go on the command line.
            self.assertEqual(r.stdout.strip(), expected)
            self.assertFalse(os.path.exists(d + "/runs"), "a dry run created the run folder")

    def test_16_nodes_outside_slurm_names_every_host(self):
        r = launch(["--hosts", "gpu[001-016]", "--gpus-per-node", "8", "--threads", "12", "--net-if", "ib0",
                    "--ib-hca", "mlx5_0", "--run-dir", "/shared/runs/{config}-{time}", "--assume-shared-fs",
                    "--bin", "dayzero", "--dry-run", "k2.yaml"],
                   env=clean_env(DAYZERO_LAUNCH_TIME="20261201-120000"))
        self.assertEqual(r.returncode, 0, r.stderr)
        hosts = ",".join(f"gpu{i:03d}:8" for i in range(1, 17))
        root = " --allow-run-as-root" if os.geteuid() == 0 else ""
        self.assertEqual(
            r.stdout.strip(),
            f"mpirun -np 128{root} --host {hosts} --map-by ppr:8:node --bind-to numa --report-bindings "
            "--mca btl '^openib' --mca btl_tcp_if_include ib0 --mca oob_tcp_if_include ib0 "
            "--mca oob_tcp_keepalive_time 10 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 5 "
            "-x DAYZERO_THREADS=12 -x NCCL_DEBUG=WARN -x NCCL_IB_HCA=mlx5_0 -x NCCL_SOCKET_IFNAME=ib0 "
            "-x OMP_NUM_THREADS=12 -x OPENBLAS_NUM_THREADS=12 "
            "dayzero run k2.yaml --dump-dir /shared/runs/k2-20261201-120000")
        self.assertIn("16 node(s) x 8 rank(s) = 128 ranks", r.stderr)

    def test_environment_overrides_defaults(self):
        r = launch(["--hosts", "a,b", "--gpus-per-node", "2", "--threads", "1", "--assume-shared-fs",
                    "--env", "NCCL_DEBUG=INFO", "--bin", "dz", "--dry-run", "c.yaml"],
                   env=clean_env(NCCL_SOCKET_IFNAME="eth7", OMPI_MCA_btl="self,tcp"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("-x NCCL_DEBUG=INFO", r.stdout)
        self.assertIn("-x NCCL_SOCKET_IFNAME=eth7", r.stdout)
        self.assertNotIn("--mca btl", r.stdout)  # the environment's OMPI_MCA_btl wins

    def test_mpirun_inside_allocation_reads_the_allocation(self):
        r = launch(["--run-dir", "/shared/{jobid}", "--assume-shared-fs", "--threads", "4", "--bin", "dz",
                    "--dry-run", "c.yaml"],
                   env=clean_env(SLURM_JOB_ID="78", SLURM_JOB_NUM_NODES="16", SLURM_JOB_NODELIST="gpu[001-016]",
                                 SLURM_NTASKS_PER_NODE="8(x16)", SLURM_GPUS_PER_NODE="8",
                                 PATH="/nonexistent:/usr/bin:/bin"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(r.stdout.startswith("mpirun -np 128 "), r.stdout)
        self.assertNotIn("--host", r.stdout)
        self.assertIn("--map-by ppr:8:node --bind-to numa", r.stdout)
        self.assertIn("16 node(s) x 8 rank(s) = 128 ranks, one per GPU; hosts: gpu001,", r.stderr)
        self.assertEqual(r.stdout.strip().split()[-1], "/shared/78")

    def test_srun_command_inside_allocation(self):
        r = launch(["--launcher", "srun", "--run-dir", "/shared/{jobid}", "--assume-shared-fs",
                    "--threads", "4", "--bin", "dz", "--dry-run", "c.yaml"],
                   env=clean_env(SLURM_JOB_ID="77", SLURM_JOB_NUM_NODES="2", SLURM_JOB_NODELIST="n[1-2]",
                                 SLURM_NTASKS_PER_NODE="4", SLURM_GPUS_PER_NODE="h100:4",
                                 PATH="/nonexistent:/usr/bin:/bin"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("srun --nodes=2 --ntasks-per-node=4 --ntasks=8 --mpi=pmix --kill-on-bad-exit=1 "
                      "--gpus-per-node=4 --gpu-bind=closest --cpu-bind=cores dz run c.yaml --dump-dir /shared/77",
                      r.stdout)


class StartupFailures(unittest.TestCase):
    def test_ranks_per_node_not_matching_gpus(self):
        r = launch(["--hosts", "a,b", "--gpus-per-node", "8", "--ranks-per-node", "4", "--assume-shared-fs",
                    "--dry-run", "c.yaml"])
        self.assertEqual(r.returncode, 2)
        self.assertIn("4 ranks per node (--ranks-per-node) but 8 GPUs per node", r.stderr)
        # The same from an allocation that asked for the wrong task count.
        r = launch(["--dry-run", "--assume-shared-fs", "c.yaml"],
                   env=clean_env(SLURM_JOB_ID="9", SLURM_JOB_NUM_NODES="2", SLURM_NTASKS_PER_NODE="16",
                                 SLURM_GPUS_PER_NODE="8", SLURM_JOB_NODELIST="n[1-2]"))
        self.assertEqual(r.returncode, 2)
        self.assertIn("16 ranks per node (the allocation's --ntasks-per-node) but 8 GPUs per node", r.stderr)
        self.assertIn("--ntasks-per-node=8", r.stderr)
        # Matching counts pass (the negative control).
        r = launch(["--hosts", "a,b", "--gpus-per-node", "8", "--ranks-per-node", "8", "--assume-shared-fs",
                    "--dry-run", "c.yaml"])
        self.assertEqual(r.returncode, 0, r.stderr)

    def test_run_folder_not_shared(self):
        with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as d:
            args = ["--hosts", "a,b", "--gpus-per-node", "8", "--run-dir", d + "/run", "--dry-run"]
            r = launch(args + ["c.yaml"])
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn("that only this node sees, and the job spans 2 nodes", r.stderr)
            self.assertIn(d, r.stderr)
            self.assertEqual(launch(args + ["--assume-shared-fs", "c.yaml"]).returncode, 0)
            # One node needs no shared filesystem.
            r = launch(["--hosts", "a", "--gpus-per-node", "8", "--run-dir", d + "/run", "--dry-run", "c.yaml"])
            self.assertEqual(r.returncode, 0, r.stderr)

    def fake_bin(self, d, name, script):
        p = os.path.join(d, name)
        with open(p, "w") as f:
            f.write("#!/bin/sh\n" + script)
        os.chmod(p, 0o755)

    def test_pmi_mismatch_under_srun(self):
        with tempfile.TemporaryDirectory() as d:
            # A Slurm built without PMIx: srun --mpi=list has no pmix.
            self.fake_bin(d, "srun", 'echo "MPI plugin types are..."; echo "	none"; echo "	pmi2"; '
                                     'echo "	cray_shasta"\n')
            self.fake_bin(d, "ompi_info", "echo 'mca:pmix:ext3x:version:full:4.1.4'; "
                                          "echo 'mca:ess:pmi:version:full:4.1.4'\n")
            env = clean_env(PATH=d + ":/usr/bin:/bin")
            base = ["--launcher", "srun", "--nodes", "2", "--gpus-per-node", "8", "--assume-shared-fs",
                    "--dry-run"]
            r = launch(base + ["c.yaml"], env=env)
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn("srun --mpi=pmix: this Slurm has no such plugin (srun --mpi=list offers "
                          "cray_shasta, none, pmi2)", r.stderr)
            # pmi2 is offered and this Open MPI has Slurm's PMI client: accepted.
            r = launch(base + ["--srun-mpi", "pmi2", "c.yaml"], env=env)
            self.assertEqual(r.returncode, 0, r.stderr)
            # An Open MPI without a PMIx client under srun --mpi=pmix.
            self.fake_bin(d, "srun", 'echo "MPI plugin types are..."; echo "	pmix"; echo "	none"\n')
            self.fake_bin(d, "ompi_info", "echo 'mca:pmix:isolated:version:full:4.1.4'\n")
            r = launch(base + ["c.yaml"], env=env)
            self.assertEqual(r.returncode, 2)
            self.assertIn("the Open MPI on PATH has no PMIx client", r.stderr)
            # srun --mpi=none cannot wire Open MPI's ranks.
            r = launch(base + ["--srun-mpi", "none", "c.yaml"], env=env)
            self.assertEqual(r.returncode, 2)
            self.assertIn("srun --mpi=none gives Open MPI no way to wire up its ranks", r.stderr)

    def test_run_folder_probe_names_the_blind_node(self):
        with tempfile.TemporaryDirectory() as d:
            # A fake mpirun that runs the probe script as two nodes, node02 without the folder
            # (the probe file itself is removed afterwards).
            self.fake_bin(d, "mpirun", 'for a; do last="$a"; done\n'
                                       'sh -c "$last" || exit 1\n'
                                       'echo "dayzero-probe: node02 cannot see /x"; exit 1\n')
            base = ["--hosts", "node[01-02]", "--gpus-per-node", "1", "--assume-shared-fs", "--run-dir", d + "/run",
                    "--bin", "/bin/true"]
            r = launch(base + ["c.yaml"], env=clean_env(PATH=d + ":/usr/bin:/bin"))
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn("is not on a filesystem every node sees: node02 cannot see a file written there", r.stderr)
            self.assertFalse(any(n.startswith("probe-") for n in os.listdir(d + "/run/launch")))
            # Every node sees it: the probe passes and the run starts (the fake mpirun again).
            self.fake_bin(d, "mpirun", 'for a; do last="$a"; done\n'
                                       'case " $* " in *" sh -c "*) sh -c "$last";; *) exit 0;; esac\n')
            r = launch(base + ["c.yaml"], env=clean_env(PATH=d + ":/usr/bin:/bin"))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertNotIn("cannot see", r.stderr)

    def test_pmi_failure_at_start_is_explained(self):
        with tempfile.TemporaryDirectory() as d:
            self.fake_bin(d, "srun", 'case "$1" in --mpi=list) echo "	pmix";; *) '
                                     'echo "[n1:123] OPAL ERROR: Not initialized in file pmix3x_client.c" >&2; '
                                     'exit 1;; esac\n')
            r = launch(["--launcher", "srun", "--nodes", "1", "--cpu", "--ranks-per-node", "2", "--run-dir",
                        d + "/run", "--bin", "/bin/true", "c.yaml"], env=clean_env(PATH=d + ":/usr/bin:/bin"))
            self.assertEqual(r.returncode, 1)
            self.assertIn("srun's --mpi plugin and the MPI library do not match", r.stderr)
            with open(d + "/run/launch/exit_code") as f:
                self.assertEqual(f.read().strip(), "1")


class Supervision(unittest.TestCase):
    """A launcher that outlives its ranks' watchdog: once a hang report is in the run folder and
    --abort-grace has passed, its process group is ended and the exit is 3 (docs/cluster.md)."""

    def fake_mpirun(self, d, ignore_term):
        # Writes rank 1's hang report into the run folder (the argument after --dump-dir), then
        # waits like an mpirun whose lost daemon never answers, with a child in its group.
        trap = "trap '' TERM; " if ignore_term else ""
        p = os.path.join(d, "mpirun")
        with open(p, "w") as f:
            f.write("#!/bin/bash\n[[ $1 == --version ]] && { echo 'mpirun (fake)'; exit 0; }\n" + trap +
                    'while [[ $# -gt 0 && $1 != --dump-dir ]]; do shift; done; run=$2\n'
                    'sleep 1000 & echo $! > "$run/../child.pid"\n'
                    'sleep 0.5; mkdir -p "$run/hang"; echo "{}" > "$run/hang/rank-00001.json"\n'
                    'while :; do sleep 1; done\n')
        os.chmod(p, 0o755)

    def run_supervised(self, ignore_term):
        with tempfile.TemporaryDirectory() as d:
            self.fake_mpirun(d, ignore_term)
            run = d + "/run"
            t0 = time.monotonic()
            r = launch(["--cpu", "--ranks-per-node", "2", "--run-dir", run, "--bin", "/bin/true",
                        "--abort-grace", "1", "c.yaml"], env=clean_env(PATH=d + ":/usr/bin:/bin"))
            took = time.monotonic() - t0
            self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
            self.assertIn("has not exited", r.stderr)
            with open(run + "/launch/supervisor.json") as f:
                sup = json.load(f)
            self.assertTrue(sup["ended_launcher"])
            self.assertEqual(sup["first_report"], "hang/rank-00001.json")
            self.assertEqual(sup["signal"], "SIGKILL" if ignore_term else "SIGTERM")
            with open(run + "/launch/exit_code") as f:
                self.assertEqual(f.read().strip(), "3")
            with open(d + "/child.pid") as f:
                child = int(f.read())
            time.sleep(0.2)
            try:
                with open(f"/proc/{child}/stat") as f:
                    state = f.read().split(")")[-1].split()[0]
            except OSError:
                state = "gone"
            self.assertIn(state, ("gone", "Z"), "the launcher's child survived its process group's end")
            return took

    def test_launcher_that_outlives_a_hang_report_is_ended(self):
        took = self.run_supervised(ignore_term=False)
        self.assertLess(took, 10)

    def test_launcher_that_ignores_sigterm_is_killed(self):
        took = self.run_supervised(ignore_term=True)
        self.assertLess(took, 15)

    def test_no_hang_report_no_supervision(self):
        with tempfile.TemporaryDirectory() as d:
            with open(d + "/mpirun", "w") as f:
                f.write("#!/bin/sh\nsleep 2; exit 7\n")
            os.chmod(d + "/mpirun", 0o755)
            r = launch(["--cpu", "--ranks-per-node", "2", "--run-dir", d + "/run", "--bin", "/bin/true",
                        "--abort-grace", "1", "c.yaml"], env=clean_env(PATH=d + ":/usr/bin:/bin"))
            self.assertEqual(r.returncode, 7, r.stderr)  # the launcher's own exit, passed through
            self.assertFalse(os.path.exists(d + "/run/launch/supervisor.json"))


class RealLaunch(unittest.TestCase):
    def test_one_node_cpu_run_records_everything(self):
        with tempfile.TemporaryDirectory() as d:
            model, run = d + "/model", d + "/run"
            subprocess.run([DAYZERO, "make-model", "--family", "llama", "--out", model], check=True,
                           capture_output=True, timeout=120)
            with open(d + "/c.yaml", "w") as f:
                f.write(f"model: {{path: {model}}}\nprompts:\n  - {{id: a, tokens: [1, 2, 3]}}\n"
                        "generate: {max_new_tokens: 2}\n")
            # An earlier attempt of the same job id is moved aside, not mixed in.
            os.makedirs(run + "/events")
            open(run + "/rank-00000.h5", "w").close()
            r = launch(["--cpu", "--ranks-per-node", "2", "--oversubscribe", "--threads", "1", "--run-dir", run,
                        "--bin", DAYZERO, d + "/c.yaml"])
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            self.assertTrue(os.path.exists(run + ".attempt-1/rank-00000.h5"))
            for n in ("rank-00000.h5", "rank-00001.h5", "plan.json", "launch/command.txt", "launch/env.txt",
                      "launch/hosts.txt", "launch/launch.json"):
                self.assertTrue(os.path.exists(os.path.join(run, n)), n)
            with open(run + "/launch/command.txt") as f:
                command = f.read().strip()
            self.assertEqual(command, r.stdout.splitlines()[0])
            self.assertIn("--map-by ppr:2:node --bind-to none --oversubscribe", command)
            info = json.load(open(run + "/launch/launch.json"))
            self.assertEqual(info["world_size"], 2)
            self.assertEqual(shlex.join(info["command"]), command)
            self.assertTrue(info["versions"]["dayzero"].startswith("dayzero "))
            self.assertIn("Open MPI", info["versions"]["mpirun"])
            env = open(run + "/launch/env.txt").read()
            self.assertIn("DAYZERO_THREADS=1\n", env)
            self.assertEqual(open(run + "/launch/exit_code").read().strip(), "0")


class Preflight(unittest.TestCase):
    """--preflight runs `dayzero preflight` on the job's layout first and starts the job only after
    exit 0 (or exit 1 with --preflight-anyway). A fake dayzero records its arguments and exits with
    FAKE_PREFLIGHT_RC for preflight."""

    def fake(self, d):
        path = os.path.join(d, "fake-dayzero")
        with open(path, "w") as f:
            f.write(f"#!/bin/sh\necho \"$1\" >> {d}/calls\n"
                    "if [ \"$1\" = preflight ]; then exit ${FAKE_PREFLIGHT_RC:-0}; fi\nexit 0\n")
        os.chmod(path, 0o755)
        return path

    def launch_fake(self, d, rc, extra=()):
        open(os.path.join(d, "calls"), "w").close()
        r = launch(["--cpu", "--ranks-per-node", "1", "--threads", "1", "--run-dir", d + "/run", "--bin",
                    self.fake(d), "--preflight", *extra, d + "/c.yaml"],
                   env=clean_env(FAKE_PREFLIGHT_RC=str(rc)))
        with open(os.path.join(d, "calls")) as f:
            # The launcher's own `--version` for its record is not a start.
            return r, [c for c in f.read().split() if not c.startswith("-")]

    def test_dry_run_prints_preflight_then_the_job(self):
        r = launch(["--hosts", "a,b", "--gpus-per-node", "2", "--threads", "1", "--assume-shared-fs",
                    "--run-dir", "/shared/r", "--bin", "dz", "--preflight", "--dry-run", "c.yaml"])
        self.assertEqual(r.returncode, 0, r.stderr)
        lines = r.stdout.strip().splitlines()
        self.assertEqual(len(lines), 2, r.stdout)
        self.assertTrue(lines[0].endswith("dz preflight c.yaml --dump-dir /shared/r"), lines[0])
        self.assertTrue(lines[1].endswith("dz run c.yaml --dump-dir /shared/r"), lines[1])
        # The same launcher options for both.
        self.assertEqual(lines[0].split(" dz ")[0], lines[1].split(" dz ")[0])

    def test_job_starts_after_exit_0(self):
        with tempfile.TemporaryDirectory() as d:
            r, calls = self.launch_fake(d, 0)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(calls, ["preflight", "run"])

    def test_exit_1_stops_unless_told(self):
        with tempfile.TemporaryDirectory() as d:
            r, calls = self.launch_fake(d, 1)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertEqual(calls, ["preflight"])
            self.assertIn("the job is not started", r.stderr)
            r, calls = self.launch_fake(d, 1, ["--preflight-anyway"])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(calls, ["preflight", "run"])

    def test_exit_3_stops_even_when_told(self):
        with tempfile.TemporaryDirectory() as d:
            r, calls = self.launch_fake(d, 3, ["--preflight-anyway"])
            self.assertEqual(r.returncode, 3, r.stderr)
            self.assertEqual(calls, ["preflight"])


if __name__ == "__main__":
    DAYZERO = os.path.abspath(sys.argv.pop(1))
    unittest.main(verbosity=2)
