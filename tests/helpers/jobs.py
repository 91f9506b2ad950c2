"""Multi-rank jobs: the recorded gloo runs, hand-made all-reduce jobs with a late rank
(tests/engine/test_crossrank.py), a DDP step on gloo (tests/engine/test_gloo_path.py), a chain of
all-reduces the ranks take turns to hold up, a 1F1B pipeline and a send/recv pair
(tests/engine/test_crossrank_parallel.py derives their paths), a pipeline whose first stage runs
a whole step ahead (tests/advice/test_path_replay_agreement.py) and a shared-link cluster file."""

from __future__ import annotations

from pathlib import Path

from ctda_sql.testing.tracebuilder import DEFAULT_BASE_TS, TraceBuilder

GLOO = Path(__file__).parent.parent / "data" / "gloo"
LATE_US = 300.0


def collective(b: TraceBuilder, main, worker, call_ts: float, exec_ts: float, exec_end: float,
               ranks: list[int], nelems: int = 1024) -> None:
    """A gloo all-reduce: the c10d call (with record_param_comms inside) on the main thread,
    executed by a gloo worker thread from exec_ts to exec_end."""
    b.cpu_op(main, "c10d::allreduce_", ts=call_ts, dur=5, **{"Input Dims": [[[nelems]]], "Input type": ["TensorList"]})
    b.cpu_op(main, "record_param_comms", ts=call_ts + 1, dur=3, **{
        "Collective name": "allreduce", "In msg nelems": nelems, "Out msg nelems": nelems, "dtype": "Float",
        "Process Group Name": "0", "Process Group Ranks": str(ranks), "Group size": len(ranks)})
    b.annotation(worker, "gloo:all_reduce", ts=exec_ts, dur=exec_end - exec_ts,
                 **{"Input Dims": [[nelems]], "Input type": ["float"]})


def job(folder: Path, world: int, steps: int, late: dict[int, int] | None = None,
        offsets: dict[int, float] | None = None, extra_on_rank0: bool = False) -> Path:
    """`world` ranks, `steps` steps of 1000 us: compute, an all-reduce, an update. In step s
    the rank late[s] computes LATE_US longer, so everyone waits for it at the all-reduce.
    offsets[r] shifts rank r's clock; ends get a few us of deterministic jitter. Rank 0's steps
    start (so, as steps partition the timeline, end) 5 us after the others', so the path starts
    there."""
    late, offsets = late or {}, offsets or {}
    folder.mkdir(parents=True, exist_ok=True)
    ranks = list(range(world))
    for rank in ranks:
        b = TraceBuilder(rank=rank, world_size=world, base_ts=DEFAULT_BASE_TS + int(offsets.get(rank, 0)),
                         pid=1000 + rank)
        main, worker = b.thread(100 + rank, "pt_main_thread"), b.thread(500 + rank, "gloo worker")
        for step in range(1, steps + 1):
            t0 = (step - 1) * 1000.0
            b.step(step, main, ts=t0 + (5 if rank == 0 else 0), dur=990)
            compute = 100 + (LATE_US if late.get(step) == rank else 0)
            b.cpu_op(main, "aten::mm", ts=t0 + 10, dur=compute)
            arrival = t0 + 20 + compute
            last_arrival = t0 + 20 + 100 + (LATE_US if step in late else 0)
            end = last_arrival + 50 + ((rank * 7 + step * 3) % 7 - 3)
            collective(b, main, worker, arrival, arrival + 2, end, ranks)
            b.cpu_op(main, "aten::add_", ts=end + 5, dur=20)
        if extra_on_rank0 and rank == 0:
            t0 = steps * 1000.0
            collective(b, main, worker, t0 - 8, t0 - 6, t0 - 2, ranks)
        b.write(folder / f"rank-{rank}.json.gz")
    return folder


def gloo_ddp_rank(rank: int, compute_us: float, step_us: float, nelems: int = 1024, forward: bool = False,
                  legacy: bool = False) -> TraceBuilder:
    """One rank of a 2-rank DDP step on gloo (tests/engine/test_gloo_path.py derives its path;
    tests/ingest/test_legacy_traces.py writes it in PyTorch 1.8's names too): backward compute,
    the bucket's all-reduce call, which a gloo worker runs from call + 2 to 822 while the main
    thread computes 100 us more, then the wait (nothing recorded) and the update at 842:
      main    aten::mm [10, 10 + compute), inside `## forward ## [5, compute + 15)` if `forward`
              c10d::allreduce_ [call, call + 5), call = 20 + compute
              aten::mm [call + 10, call + 110), aten::add_ [842, 892)
      worker  gloo:all_reduce [call + 2, 822) of `nelems` floats
    ProfilerStep#1 [0, step_us); `legacy`: in 1.8's categories and names."""
    b = TraceBuilder(rank=rank, world_size=2, pid=1000 + rank, legacy=legacy)
    main, worker = b.thread(100 + rank, "pt_main_thread"), b.thread(500 + rank, "pt_gloo_runloop")
    b.step(1, main, ts=0, dur=step_us)
    if forward:
        b.annotation(main, "## forward ##", ts=5, dur=compute_us + 10)
    b.cpu_op(main, "aten::mm", ts=10, dur=compute_us)
    call = 20 + compute_us
    b.cpu_op(main, "c10d::allreduce_", ts=call, dur=5)
    b.annotation(worker, "gloo:all_reduce", ts=call + 2, dur=822 - (call + 2),
                 **{"Input Dims": [[nelems]], "Input type": ["float"]})
    b.cpu_op(main, "aten::mm", ts=call + 10, dur=100)                  # overlaps the transfer
    b.cpu_op(main, "aten::add_", ts=842, dur=50)                       # resumes 20 us after 822
    return b


def turn_taking_rank(rank: int, calls: int, calls_per_step: int | None = None) -> TraceBuilder:
    """Rank `rank` of 2 making `calls` gloo all-reduces 100 us apart, each waited for before the
    next: the ranks take turns to arrive 60 us late (call i: rank i mod 2), so every call gates
    the cross-rank path and the path changes rank at each one; the op after a call starts once
    its worker is done, 12 us after the late arrival. Steps of `calls_per_step` calls (default:
    one step of them all)."""
    per_step = calls_per_step or calls
    b = TraceBuilder(rank=rank, world_size=2, pid=1000 + rank)
    main, worker = b.thread(100 + rank, "pt_main_thread"), b.thread(500 + rank, "gloo worker")
    for first in range(0, calls, per_step):
        b.step(first // per_step + 1, main, ts=first * 100, dur=min(per_step, calls - first) * 100)
    for i in range(calls):
        call = 5 + i * 100 + (60 if i % 2 == rank else 0)
        end = 5 + i * 100 + 72
        collective(b, main, worker, call, call + 2, end, [0, 1])
        b.cpu_op(main, "aten::add_", ts=end + 1, dur=4)
    return b


def gloo_chain(folder: Path, calls: int, calls_per_step: int | None = None) -> Path:
    """turn_taking_rank's two ranks as folder/rank-R.json.gz."""
    folder.mkdir(parents=True, exist_ok=True)
    for rank in range(2):
        turn_taking_rank(rank, calls, calls_per_step).write(folder / f"rank-{rank}.json.gz")
    return folder


TRANSFER_US = 10.0


def staged_pipeline_job(folder: Path, stage_us: dict[int, float], slow_us: float) -> Path:
    """Two ranks' traces of one 1F1B step as tests/engine/test_crossrank_parallel.py derives it: stage
    s's forward and backward take stage_us[s], and stage 1 sleeps slow_us in `slow_stage` before
    each forward (an annotation with no op inside; tests/whatif/test_whatif_parallel.py removes it)."""
    folder.mkdir(parents=True, exist_ok=True)
    b = {rank: TraceBuilder(rank=rank, world_size=2, pid=2000 + rank) for rank in (0, 1)}
    lane = {rank: b[rank].thread(200 + rank, "pt_main_thread") for rank in (0, 1)}

    def op(rank, name, ts, dur):
        b[rank].cpu_op(lane[rank], name, ts=ts, dur=dur)
        return ts + dur + 1

    def forward(rank, ts):
        if rank == 1 and slow_us:
            b[rank].annotation(lane[rank], "slow_stage", ts=ts, dur=slow_us)
            ts += slow_us
        return op(rank, "aten::mm", ts, stage_us[rank])

    def p2p(sender_ts, receiver_ts, sender, receiver):
        done = max(sender_ts, receiver_ts) + TRANSFER_US
        for rank, ts, kind, peer in ((sender, sender_ts, "send", receiver), (receiver, receiver_ts, "recv", sender)):
            p2p_call(b[rank], lane[rank], kind, peer, ts, done)
        return done

    backward = "aten::mm_backward"
    t0 = forward(0, 10)                                  # F0 on stage 0; stage 1 posts R(a0) at 5
    done = p2p(t0, 5, 0, 1)
    t0 = forward(0, done + 1)                            # F1 on stage 0
    t1 = op(1, backward, forward(1, done + 1), stage_us[1])   # F0, B0 on stage 1
    for mb in (1, 2, 3):
        # fused batches: stage 0 [S(a_mb) R(g_mb-1)], stage 1 [S(g_mb-1) R(a_mb)], posted 3 us apart
        a_done = p2p(t0, t1 + 3, 0, 1)
        g_done = p2p(t1, t0 + 3, 1, 0)
        resume = max(a_done, g_done) + 1
        t0 = op(0, backward, resume, stage_us[0])
        if mb < 3:
            t0 = forward(0, t0)
        t1 = op(1, backward, forward(1, resume), stage_us[1])
    done = p2p(t1, t0, 1, 0)                             # g3
    end0 = op(0, "aten::add_", op(0, backward, done + 1, stage_us[0]), 20)
    end1 = op(1, "aten::add_", done + 1, 20)
    b[0].step(1, lane[0], ts=0, dur=end0 + 5)
    b[1].step(1, lane[1], ts=0, dur=end1 + 6)
    for rank in (0, 1):
        b[rank].write(folder / f"rank-{rank}.json.gz")
    return folder


def p2p_call(builder: TraceBuilder, lane, kind: str, peer: int, ts: float, done: float) -> None:
    """A gloo send or recv to / from `peer` posted at `ts`: its call (2 us), then its gloo:send /
    gloo:recv on the same thread until `done`."""
    builder.cpu_op(lane, "c10d::send" if kind == "send" else "c10d::recv_", ts=ts, dur=2, **{
        "Input Dims": [[[8, 256]], [], [], []], "Input type": ["TensorList", "", "Scalar", "Scalar"],
        "Concrete Inputs": ["", "", str(peer), "0"]})
    builder.annotation(lane, f"gloo:{kind}", ts=ts + 2, dur=done - ts - 2,
                       **{"Input Dims": [[8, 256]], "Input type": ["float"]})


def p2p_job(folder: Path, buffered: bool) -> Path:
    """Write the two ranks' traces of the send/recv pair tests/engine/test_crossrank_parallel.py derives
    (buffered: the send returns 7 us after it is posted; else when the transfer is done)."""
    folder.mkdir(parents=True, exist_ok=True)
    # (rank 1's trace is the same in both versions but for its pid: ingest skips a file it has)
    b = {rank: TraceBuilder(rank=rank, world_size=2, pid=3000 + 10 * buffered + rank) for rank in (0, 1)}
    lane = {rank: b[rank].thread(300 + rank, "pt_main_thread") for rank in (0, 1)}
    send_ts, recv_ts = 111, 601
    done = max(send_ts, recv_ts) + TRANSFER_US
    send_done = send_ts + 7 if buffered else done
    p2p_call(b[0], lane[0], "send", 1, send_ts, send_done)
    p2p_call(b[1], lane[1], "recv", 0, recv_ts, done)
    b[0].cpu_op(lane[0], "aten::mm", ts=10, dur=100)
    b[0].cpu_op(lane[0], "aten::mm", ts=send_done + 1, dur=800)
    b[0].cpu_op(lane[0], "aten::add_", ts=send_done + 802, dur=20)
    b[0].step(1, lane[0], ts=0, dur=send_done + 827)
    b[1].cpu_op(lane[1], "aten::mm", ts=10, dur=590)
    b[1].cpu_op(lane[1], "aten::mm", ts=done + 1, dur=100)
    b[1].step(1, lane[1], ts=0, dur=720)
    for rank in (0, 1):
        b[rank].write(folder / f"rank-{rank}.json.gz")
    return folder


def shared_link(ranks: int, rate_mbit: float, device_speed: float = 1.0) -> dict:
    return {"cluster": {"hosts": ranks, "devices_per_host": 1, "device_speed": device_speed},
            "inter_host": {"topology": "shared-link", "bandwidth_gbps": rate_mbit / 1000.0}}


def run_ahead_pipeline_job(folder: Path) -> Path:
    """Two gloo pipeline stages, two steps each, where stage 0 runs a whole step ahead: its step
    1 only sends (buffered sends return 7 us after posting), so its step 2 begins before stage 1
    begins its step 1 (tests/advice/test_path_replay_agreement.py derives it):
      rank 0  step 1 [0, 200):    aten::mm [10, 60), send a1 [61, 68)
              step 2 [200, 1535): aten::mm [210, 260), send a2 [261, 268), recv g2 [270, 1507),
                                  aten::add_ [1508, 1528)
      rank 1  step 1 [250, 880):  recv a1 [255, 265), aten::addmm [266, 866)
              step 2 [880, 1510): recv a2 [885, 895), aten::addmm [896, 1496), send g2 [1497, 1504)
    A receive ends TRANSFER_US after the later of its post and its send; sends and receives pair
    within a step, as PyTorch's pipelines make them."""
    folder.mkdir(parents=True, exist_ok=True)
    b = {rank: TraceBuilder(rank=rank, world_size=2, pid=4000 + rank) for rank in (0, 1)}
    lane = {rank: b[rank].thread(400 + rank, "pt_main_thread") for rank in (0, 1)}
    for rank, steps in ((0, ((0, 200), (200, 1335))), (1, ((250, 630), (880, 630)))):
        for number, (ts, dur) in enumerate(steps, start=1):
            b[rank].step(number, lane[rank], ts=ts, dur=dur)
    for ts in (10, 210):                                                # stage 0's forwards
        b[0].cpu_op(lane[0], "aten::mm", ts=ts, dur=50)
        p2p_call(b[0], lane[0], "send", 1, ts + 51, ts + 58)
    for posted, sent in ((255, 61), (885, 261)):                        # stage 1's forward-backwards
        received = max(posted, sent) + TRANSFER_US
        p2p_call(b[1], lane[1], "recv", 0, posted, received)
        b[1].cpu_op(lane[1], "aten::addmm", ts=received + 1, dur=600)
    p2p_call(b[1], lane[1], "send", 0, 1497, 1504)
    p2p_call(b[0], lane[0], "recv", 1, 270, 1507)                       # stage 0's update
    b[0].cpu_op(lane[0], "aten::add_", ts=1508, dur=20)
    for rank in (0, 1):
        b[rank].write(folder / f"rank-{rank}.json.gz")
    return folder
