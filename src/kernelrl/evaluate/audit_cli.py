"""`kernelrl audit CAND [--task REF]`: print the static findings for a candidate and what each one means."""
from __future__ import annotations

from pathlib import Path

import typer

from kernelrl.evaluate.audit import MEANINGS, audit


def _read(path: Path, what: str) -> str:
    if not path.is_file():
        typer.echo(f"error: {path}: no such {what} file", err=True)
        raise typer.Exit(2)
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        typer.echo(f"error: {path}: cannot read {what} file: {e}", err=True)
        raise typer.Exit(2)


def audit_command(
    cand: Path = typer.Argument(..., help="candidate file (defines ModelNew)"),
    task: Path = typer.Option(None, "--task", help="its reference file, to compare sizes, dtypes and policies"),
    json_out: bool = typer.Option(False, "--json", help="print the findings as one JSON list"),
) -> None:
    """Static findings (AST) for a candidate: a first filter and evidence, never the verdict by itself."""
    source = _read(cand, "candidate")
    task_source = _read(task, "reference") if task is not None else None
    try:
        findings = audit(source, task_source)
    except SyntaxError as e:
        typer.echo(f"error: {e.filename or cand}: syntax error at line {e.lineno}: {e.msg}", err=True)
        raise typer.Exit(2)
    if json_out:
        import json
        typer.echo(json.dumps([f.to_dict() for f in findings]))
        raise typer.Exit(1 if any(f.severity == "reject" for f in findings) else 0)
    if not findings:
        typer.echo(f"{cand}: no findings")
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"static audit of {cand}", show_lines=False)
    for col in ("line", "severity", "class", "finding"):
        table.add_column(col, overflow="fold")
    for f in findings:
        style = "red" if f.severity == "reject" else "yellow"
        table.add_row(str(f.line), f"[{style}]{f.severity}[/{style}]", f.hack, f.message)
    console = Console()
    console.print(table)
    console.print("\nwhat the classes mean:")
    for hack in sorted({f.hack for f in findings}):
        console.print(f"  [bold]{hack}[/bold]: {MEANINGS.get(hack, '')}")
    rejects = sum(f.severity == "reject" for f in findings)
    console.print(f"\n{rejects} finding(s) would reject on their own; warnings are evidence for the runtime "
                  "checks, which decide.")
    raise typer.Exit(1 if rejects else 0)
