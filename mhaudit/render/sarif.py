"""SARIF 2.1.0 for code scanning: every rule in the driver, each finding at its source line."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import quote

from mhaudit import __version__
from mhaudit.data import Finding, Report, Severity, SourceLocation
from mhaudit.render.escape import text_data
from mhaudit.render.style import PLAIN, RenderOptions
from mhaudit.rules import REGISTRY

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
PROJECT_URL = "https://github.com/mhaudit/mhaudit"
"""Where the rule pages live (``docs/rules/CODE.md``); the same URL as pyproject's."""
LEVELS = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}


def rule_help_uri(code: str) -> str:
    """The docs page of a rule."""
    return f"{PROJECT_URL}/blob/main/docs/rules/{code}.md"


def driver_rules() -> list[dict[str, Any]]:
    """Every declared rule as a SARIF reportingDescriptor."""
    return [
        {
            "id": rule.code,
            "name": rule.name,
            "shortDescription": {"text": rule.summary},
            "fullDescription": {"text": rule.why},
            "help": {"text": f"{rule.fix}\n\nExample: {rule.example}"},
            "helpUri": rule_help_uri(rule.code),
            "defaultConfiguration": {"level": LEVELS[rule.severity]},
            "properties": {"tags": ["attention", "performance"]},
        }
        for rule in REGISTRY
    ]


def fingerprint(*parts: str) -> str:
    """A stable digest of what identifies a finding (never its numbers or line)."""
    return hashlib.sha256("\0".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:32]


def path_uri(path: str) -> str:
    """A file path as an RFC 3986 reference: ``/`` separators, every other character outside
    the unreserved set percent-encoded as UTF-8 (``my model.py`` -> ``my%20model.py``; a
    ``:`` too, so a first segment never reads as a scheme)."""
    return quote(path.replace("\\", "/"), safe="/")


def physical(where: SourceLocation | None) -> list[dict[str, Any]]:
    """``locations`` of a result: the file and line, when known."""
    if where is None:
        return []
    artifact: dict[str, Any] = {"uri": path_uri(where.path)}
    if not where.path.startswith("/"):
        artifact["uriBaseId"] = "%SRCROOT%"
    return [{"physicalLocation": {"artifactLocation": artifact,
                                  "region": {"startLine": where.line}}}]


def finding_location(report: Report, finding: Finding) -> SourceLocation | None:
    """The block's location, else where the model is built."""
    for block in report.blocks:
        if block.name == finding.block and block.location is not None:
            return block.location
    return report.model.location


def finding_result(report: Report, finding: Finding, rule_index: dict[str, int]) -> dict[str, Any]:
    """One SARIF result for one finding."""
    block = "(root)" if finding.block == "" else finding.block
    where = f"{block}: " if block is not None else ""
    result: dict[str, Any] = {
        "ruleId": finding.code,
        "level": LEVELS[finding.severity],
        "message": {"text": f"{where}{finding.message}. Fix: {finding.fix}"},
        "locations": physical(finding_location(report, finding)),
        "partialFingerprints": {
            "mhaudit/v1": fingerprint(finding.code, report.model.source, finding.block or ""),
        },
        "properties": {"model": report.model.source, "block": finding.block,
                       "numbers": dict(finding.numbers)},
    }
    if finding.code in rule_index:
        result["ruleIndex"] = rule_index[finding.code]
    if block is not None:
        result["locations"] = result["locations"] or [{}]
        result["locations"][0]["logicalLocations"] = [{"name": block, "kind": "module"}]
    return result


def sarif_log(reports: Sequence[Report], extra_rules: Sequence[dict[str, Any]] = (),
              extra_results: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """One run holding every report's findings (several targets audit into one run)."""
    rules = driver_rules() + list(extra_rules)
    index = {rule["id"]: i for i, rule in enumerate(rules)}
    results = [finding_result(r, f, index) for r in reports for f in r.findings]
    results += [{**res, "ruleIndex": index[res["ruleId"]]} for res in extra_results]
    return {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {
                "name": "mhaudit", "version": __version__, "semanticVersion": __version__,
                "informationUri": PROJECT_URL, "rules": rules,
            }},
            "results": results,
            "columnKind": "unicodeCodePoints",
        }],
    }


def render_sarif(report: Report, options: RenderOptions = PLAIN) -> str:
    """One report as a SARIF log."""
    return render_sarif_many([report], options)


def render_sarif_many(reports: Sequence[Report], options: RenderOptions = PLAIN) -> str:
    """Several reports as one SARIF log with one run."""
    return json.dumps(text_data(sarif_log(reports)), indent=2) + "\n"
