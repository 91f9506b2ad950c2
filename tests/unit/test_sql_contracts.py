"""Every SQL stage file states its contract (warehouse/core/stages.py): the tables it reads,
the tables and macros it makes with their columns, the persistent tables it writes and its
typed parameters. Checked three ways:
- against the SQL itself (sqlglot): the contract names what the statements read, make and write;
- against a run: a small hand-made two-rank job goes through ingest, analyze (every method),
  a what-if, a what-if --cluster and advise, and after each stage the tables and macros it
  made are compared with DuckDB's catalog (duckdb_columns, duckdb_functions);
- against the order the code runs them in: every table a stage reads is persistent, or made
  by a stage of its group that ran before it; numeric prefixes agree with the dependencies."""

from __future__ import annotations

import json
import re
from pathlib import Path

import duckdb
import pytest
import sqlglot
from sqlglot import exp

from ctda_sql.core import sqlfiles, stages
from ctda_sql.core.connection import connect
from ctda_sql.testing.tracebuilder import TraceBuilder

from helpers.jobs import collective

GROUPS = ("analysis", "crossrank", "whatif", "advice", "advice/rules", "lake", "ingest")
# the stages that do not run through core.stages.run_stage, with the reason; their `rows`
# results are checked by running them here (_rows_of)
NOT_RUN_BY_THE_FLOW = {
    "lake/derive_events.sql": "a lake's write task (tests/lake/test_lake.py)",
    "lake/cross_rank_events.sql": "a lake's analyze task",
    "lake/table_comments.sql": "a lake's views",
}
_COLUMN_CODEC = re.compile(r"\s+USING\s+COMPRESSION\s+\w+", re.I)


def stage_files() -> list[str]:
    return [f"{group}/{name}" for group in GROUPS for name in sqlfiles.names(group)]


def group_of(name: str) -> str:
    return name.split("/")[0]


# ---- the contract against the SQL --------------------------------------------------------------

def sql_facts(text: str) -> dict[str, list[str]]:
    """What the statements of a stage file make, read, write and call, as sqlglot sees them."""
    facts: dict[str, list[str]] = {key: [] for key in ("makes", "macros", "reads", "writes", "calls")}

    def add(key, name):
        if name and name not in facts[key]:
            facts[key].append(name)

    for statement in duckdb.extract_statements(text):
        tree = sqlglot.parse_one(_COLUMN_CODEC.sub("", statement.query), read="duckdb")
        ctes = {cte.alias_or_name.lower() for cte in tree.find_all(exp.CTE)}
        target = None
        if isinstance(tree, (exp.Create, exp.Insert, exp.Delete, exp.Update)):
            table = tree.this if isinstance(tree.this, exp.Table) else tree.this.find(exp.Table)
            target = table.name.lower()
            is_macro = isinstance(tree, exp.Create) and str(tree.args.get("kind")).upper().endswith("MACRO")
            add("macros" if is_macro else "makes" if isinstance(tree, exp.Create) else "writes", target)
        for table in tree.find_all(exp.Table):
            name = table.name.lower()
            if name != target and name not in ctes and name not in facts["makes"]:
                add("reads", name)
        for call in tree.find_all(exp.Anonymous):
            if call.name.lower() != target:
                add("calls", call.name.lower())
    return facts


def stage_macros() -> set[str]:
    return {name for stage in stage_files() for name, _ in stages.contract(stage).macros}


def test_the_stage_files_are_found():
    assert {"analysis/40_edges.sql", "whatif/17_rules.sql", "advice/rules/straggler.sql",
            "ingest/steps.sql"} <= set(stage_files())


@pytest.mark.parametrize("name", stage_files())
def test_every_stage_file_opens_with_its_contract(name):
    contract = stages.contract(name)
    assert contract.makes or contract.writes or contract.macros, f"{name}: no makes or writes line at its top"
    used = set().union(*(names for _, names in sqlfiles.parameterized_statements(sqlfiles.load(name))))
    assert {param for param, _ in contract.params} == used, f"{name}: param lines differ from its $parameters"


@pytest.mark.parametrize("name", stage_files())
def test_the_contract_names_what_the_sql_reads_makes_and_writes(name):
    contract, facts = stages.contract(name), sql_facts(sqlfiles.load(name))
    made_here = set(facts["makes"]) | set(facts["macros"])
    read = [t for t in facts["reads"] if t not in made_here]
    read += [m for m in facts["calls"] if m in stage_macros() and m not in made_here]
    assert sorted(set(contract.reads) | set(contract.registered)) == sorted(set(read)), name
    assert sorted(contract.made) == sorted(made_here), name
    assert sorted(contract.writes) == sorted(set(facts["writes"]) - made_here), name


def test_a_contract_line_without_columns_is_refused():
    from ctda_sql.core.errors import CtdaError

    with pytest.raises(CtdaError, match="needs name\\(columns\\)"):
        stages.parse_contract("-- makes: cp_nodes\nSELECT 1;")


def test_the_contract_ends_at_the_first_line_that_is_not_one_of_its_fields():
    contract = stages.parse_contract("-- reads: a, b (a note, with commas),\n--        c\n"
                                     "-- makes: t(x,\n--          y) prose\n-- param: top INTEGER  rows\n"
                                     "-- prose that says reads:\n-- reads: not_read\nSELECT 1;")
    assert contract.reads == ("a", "b", "c")
    assert contract.makes == (("t", ("x", "y")),)
    assert contract.params == (("top", "INTEGER"),)


# ---- the run ----------------------------------------------------------------------------------

def job(folder: Path, world: int = 2, steps: int = 3) -> Path:
    """`world` ranks of `steps` steps: a matmul and its kernel, a gloo all-reduce that the
    rank computing longest holds up, an annotation, backward on the autograd thread, a device
    sync and an optimizer step; enough for every stage to have rows."""
    folder.mkdir(parents=True, exist_ok=True)
    ranks = list(range(world))
    for rank in ranks:
        b = TraceBuilder(rank=rank, world_size=world, pid=1000 + rank)
        main, worker = b.thread(100 + rank, "pt_main_thread"), b.thread(500 + rank, "gloo worker")
        autograd = b.thread(200 + rank, "pt_autograd_0")
        for step in range(1, steps + 1):
            t0 = (step - 1) * 2000.0
            b.step(step, main, ts=t0, dur=1990)
            compute = 100 + (300 if rank == step % world else 0)
            b.cpu_op(main, "aten::mm", ts=t0 + 10, dur=compute)
            b.launch(main, ts=t0 + 20, dur=10, kernel="gemm_kernel", stream=7, kernel_ts=t0 + 40, kernel_dur=200)
            arrival, end = t0 + 20 + compute, t0 + 470
            collective(b, main, worker, arrival, arrival + 2, end, ranks)
            b.annotation(main, "forward", ts=t0 + 500, dur=300)
            b.cpu_op(autograd, "autograd::engine::evaluate_function: AddmmBackward0", ts=t0 + 600, dur=200)
            b.launch(autograd, ts=t0 + 610, dur=10, kernel="gemm_backward", stream=7,
                     kernel_ts=t0 + 630, kernel_dur=150)
            b.runtime(main, "cudaDeviceSynchronize", ts=t0 + 900, dur=60)
            b.cpu_op(main, "Optimizer.step#SGD.step", ts=t0 + 1000, dur=150)
        b.write(folder / f"rank-{rank}.json")
    return folder


CLUSTER = {"cluster": {"hosts": 2, "devices_per_host": 1},
           "intra_host": {"bandwidth_gbps": 1000.0, "latency_us": 1.0},
           "inter_host": {"topology": "single-switch", "bandwidth_gbps": 10.0, "latency_us": 5.0}}


def catalog(con) -> dict[str, tuple[str, ...]]:
    """Every table's columns and every macro's parameters (macros as 'name()')."""
    tables = con.execute("SELECT table_name, list(column_name ORDER BY column_index) FROM duckdb_columns() "
                         "GROUP BY table_name").fetchall()
    macros = con.execute("SELECT function_name, any_value(parameters) FROM duckdb_functions() "
                         "WHERE function_type IN ('macro', 'table_macro') AND database_name = 'temp' "
                         "AND NOT internal GROUP BY ALL").fetchall()
    return {**{t: tuple(c) for t, c in tables}, **{f"{m}()": tuple(p) for m, p in macros}}


class Flow:
    """The stages run, in order, each with what its run added to or changed in the catalog."""

    def __init__(self, wh, runs: list[tuple[str, dict]]):
        self.wh, self.runs = wh, runs

    @property
    def con(self):
        return self.wh.con

    def first_changes(self, name: str) -> dict | None:
        return next((changed for stage, changed in self.runs if stage == name), None)


@pytest.fixture(scope="module")
def flow(tmp_path_factory) -> Flow:
    from ctda_sql.api import Warehouse
    from ctda_sql.whatif.cluster import simgrid_available

    folder = tmp_path_factory.mktemp("contracts")
    runs: list[tuple[str, dict]] = []
    real = stages.run_stage

    def recording(con, name, params, what="stage", rows=False):
        before = catalog(con)
        result = real(con, name, params, what, rows)
        after = catalog(con)
        runs.append((name, {key: value for key, value in after.items() if before.get(key) != value}))
        return result

    wh = Warehouse(folder / "w.duckdb")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(stages, "run_stage", recording)
        wh.ingest([job(folder / "job")], run="job")
        wh.analyze()
        wh.whatif(scale={"aten::mm": 0.5})
        if simgrid_available():
            wh.whatif(cluster=CLUSTER)
        wh.advise("job")
    yield Flow(wh, runs)
    wh.close()


def persistent_tables() -> set[str]:
    con = connect(":memory:")
    try:
        return {name for (name,) in con.execute("SELECT table_name FROM duckdb_tables() WHERE NOT temporary "
                                                "UNION SELECT view_name FROM duckdb_views() WHERE NOT internal "
                                                "AND NOT temporary").fetchall()}
    finally:
        con.close()


@pytest.mark.parametrize("name", [n for n in stage_files() if n not in NOT_RUN_BY_THE_FLOW
                                  and stages.contract(n).made])
def test_the_tables_and_macros_made_are_the_contracts(flow, name):
    contract = stages.contract(name)
    declared = {table: columns for table, columns in contract.makes if table != stages.RESULT}
    declared |= {f"{macro}()": params for macro, params in contract.macros}
    changed = flow.first_changes(name)
    if changed is None:  # its caller runs it by itself (advise): its tables are left on the connection
        changed = {key: value for key, value in catalog(flow.con).items() if key in declared}
        assert changed, f"{name}: the flow made none of its tables"
    assert {key: changed.get(key) for key in declared} == declared
    # and nothing else: a table made and left behind is in the contract
    assert set(changed) - set(declared) <= set(contract.writes) | set(contract.registered), name


def test_every_table_read_is_persistent_or_made_by_an_earlier_stage_of_its_group(flow):
    persistent = persistent_tables()
    made_before: dict[str, set[str]] = {}
    for name, _ in flow.runs:
        contract, group = stages.contract(name), group_of(name)
        missing = [t for t in contract.reads if t not in persistent and t not in made_before.get(group, set())]
        assert not missing, f"{name} reads {missing}, which no earlier stage of {group} made"
        made_before.setdefault(group, set()).update(contract.made, contract.writes)


def test_what_a_stage_outside_the_runner_reads_is_persistent_or_made_in_its_group(flow):
    """Stages a caller runs by itself (advice rules, queries over the stages' tables)."""
    persistent, ran = persistent_tables(), {name for name, _ in flow.runs}
    for name in [n for n in stage_files() if n not in ran]:
        made = {t for other in stage_files() if group_of(other) == group_of(name) and other != name
                for t in stages.contract(other).made + stages.contract(other).writes}
        missing = [t for t in stages.contract(name).reads if t not in persistent | made]
        assert not missing, f"{name} reads {missing}, which no stage of {group_of(name)} makes"


def test_the_code_runs_each_stage_after_the_stages_it_reads_from(flow):
    """The runs of a group follow `ordered` (makes before reads, else by file name): the
    order each caller's tuple is run in is the one the contracts derive."""
    callers = _caller_tuples()
    for folder, names in callers:
        order = stages.ordered(folder, names)
        ran = [n.split("/", 1)[1] for n, _ in flow.runs if n.startswith(folder + "/") and n.split("/", 1)[1] in names]
        first = list(dict.fromkeys(ran))
        assert first == list(order), (folder, names)


def _caller_tuples() -> list[tuple[str, tuple[str, ...]]]:
    from ctda_sql.engine import analyze, crossrank
    from ctda_sql.whatif import replay

    return [("analysis", analyze.STAGES), ("crossrank", crossrank.MATCH_STAGES + crossrank.PATH_STAGES),
            ("whatif", replay.SCOPE), ("whatif", replay.PREPARE)]


def test_the_what_ifs_scope_reads_nothing_a_scenario_stage_makes():
    """The scope stages run once per what-if, before the scenario stages run once per
    scenario: they must not read what a scenario makes (17_rules runs with the scenario,
    after the scope's 10 and 15: it reads only the scenario's --scale rules)."""
    from ctda_sql.whatif import replay

    per_scenario = {t for name in replay.PREPARE for t in stages.contract(f"whatif/{name}").made}
    for name in replay.SCOPE:
        assert not set(stages.contract(f"whatif/{name}").reads) & per_scenario, name


@pytest.mark.parametrize("group", GROUPS)
def test_numeric_prefixes_agree_with_the_dependencies(group):
    """Where a numbered stage reads what another makes, the maker's number is lower."""
    numbered = [n for n in sqlfiles.names(group) if re.match(r"\d+_", n)]
    contracts = {n: stages.contract(f"{group}/{n}") for n in numbered}
    for reader in numbered:
        for maker in numbered:
            if maker != reader and set(contracts[reader].reads) & set(contracts[maker].made):
                assert maker < reader, f"{group}/{reader} reads what {group}/{maker} makes"


# ---- result rows -------------------------------------------------------------------------------

def _rows_stages() -> list[str]:
    return [n for n in stage_files() if any(t == stages.RESULT for t, _ in stages.contract(n).makes)]


@pytest.mark.parametrize("name", _rows_stages())
def test_the_rows_a_stage_returns_are_the_contracts(flow, tmp_path, name):
    (declared,) = [columns for table, columns in stages.contract(name).makes if table == stages.RESULT]
    assert _rows_of(flow, tmp_path, name) == declared


def _rows_of(flow: Flow, folder: Path, name: str) -> tuple[str, ...]:
    """The column names of the rows the stage returns, run where its inputs are."""
    values = {"run_id": 1, "rank": None, "step": None, "top": 5, "tables": ["events"], "first_event_id": 0}
    text = sqlfiles.load(name)
    if name.startswith("ingest/"):
        return _ingest_rows(folder, name, text)
    used = set().union(*(names for _, names in sqlfiles.parameterized_statements(text)))
    params = {key: values[key] for key in used}
    return tuple(d[0] for d in flow.con.execute(text, params).description)


def _ingest_rows(folder: Path, name: str, text: str) -> tuple[str, ...]:
    """The ingest queries run in the parse worker on a bare DuckDB, over one file's events."""
    events = json.loads((job(folder / "job", steps=1) / "rank-0.json").read_text())["traceEvents"]
    (folder / "events.json").write_text(json.dumps(events))
    con = duckdb.connect()
    typed = con.sql(sqlfiles.load("ingest/typed_events.sql"),
                    params={"events_file": str(folder / "events.json"), "first_event_id": 0}).to_arrow_table()
    if name == "ingest/typed_events.sql":
        return tuple(typed.column_names)
    if name == "ingest/event_rows.sql":  # runs in the warehouse's connection, with its macros
        con = connect(":memory:")
        con.register("typed_events_raw", typed)
        con.execute("CREATE TEMP TABLE typed_events AS SELECT *, 0::BIGINT AS rank, 1::DECIMAL(38, 6) AS ts_scale, "
                    "0::DECIMAL(38, 6) AS ts_offset_us FROM typed_events_raw")
        return tuple(d[0] for d in con.execute(text, {"run_id": 1, "origin_ts": 0}).description)
    con.register("events", typed)
    return tuple(d[0] for d in con.execute(text).description)


# ---- the runner --------------------------------------------------------------------------------

def test_a_failing_statement_is_one_error_naming_the_stage_file_and_the_statement():
    from ctda_sql.core.errors import CtdaError

    con = connect(":memory:")  # no what-if scope yet: 15_graph's first statement reads wi_windows
    with pytest.raises(CtdaError) as caught:
        stages.run_stage(con, "whatif/15_graph.sql", {"queue_wait_us": 100.0, "queue_share": 0.1}, "what-if stage")
    message = str(caught.value)
    assert message.startswith("what-if stage whatif/15_graph.sql failed: Catalog Error: ")
    assert "wi_windows" in message and message.endswith("[CREATE OR REPLACE TEMP TABLE wi_nodes AS]")
    assert "\n" not in message


class _InterruptedConnection:
    def execute(self, *args):
        raise duckdb.InterruptException("INTERRUPT Error: Interrupted!")


def test_ctrl_c_inside_a_stage_passes_through_as_it_came():
    """transaction() turns it into 'interrupted; the database is unchanged'; a CtdaError
    here would print as a failed stage instead."""
    with pytest.raises(duckdb.InterruptException):
        stages.run_stage(_InterruptedConnection(), "analysis/seed_phase_rules.sql", {}, "analysis stage")


def test_the_order_follows_what_each_stage_makes_not_the_order_it_was_given():
    assert stages.ordered("analysis", ("70_persist.sql", "10_cpu_events.sql", "40_edges.sql")) == \
        ("10_cpu_events.sql", "40_edges.sql", "70_persist.sql")
    # 17_rules reads nothing of the scenario's other stages, 30_work_factors reads its wi_rules
    assert stages.ordered("whatif", ("30_work_factors.sql", "17_rules.sql")) == ("17_rules.sql", "30_work_factors.sql")
