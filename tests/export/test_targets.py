"""--export and --export-attr as typed: each form parses to its target, each mistake is one usage
line (exit 2) naming the fix, before any bundle or target is touched."""
from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from diagnose.cli import EXIT_USAGE, main
from diagnose.export.targets import ExportKind, parse_attr, parse_export


@pytest.mark.parametrize("spec, kind, where", [
    ("otlp=http://127.0.0.1:4318", ExportKind.OTLP, "http://127.0.0.1:4318"),
    ("otlp=https://collector.example:4318/v1/metrics", ExportKind.OTLP, "https://collector.example:4318"),
    ("otlp=http://gw:80/otel/v1/logs/", ExportKind.OTLP, "http://gw:80/otel"),
    ("prometheus=:9464", ExportKind.PROMETHEUS_HTTP, ("127.0.0.1", 9464)),
    ("prometheus=0.0.0.0:9464", ExportKind.PROMETHEUS_HTTP, ("0.0.0.0", 9464)),
    ("prometheus=[::1]:9464", ExportKind.PROMETHEUS_HTTP, ("::1", 9464)),
    ("prometheus=/var/lib/node_exporter/diagnose.prom", ExportKind.PROMETHEUS_FILE,
     Path("/var/lib/node_exporter/diagnose.prom")),
    ("prometheus=./a:1", ExportKind.PROMETHEUS_FILE, Path("a:1")),
])
def test_each_form_parses_to_its_target(spec, kind, where):
    t = parse_export(spec)
    assert t.kind is kind and t.spec == spec
    got = t.url if kind is ExportKind.OTLP else (t.host, t.port) if kind is ExportKind.PROMETHEUS_HTTP else t.path
    assert got == where


@pytest.mark.parametrize("spec, said", [
    ("statsd=:8125", "SCHEME one of otlp, prometheus"),
    ("otlp", "SCHEME=WHERE"),
    ("otlp=127.0.0.1:4318", "otlp=http(s)://HOST:PORT"),
    ("otlp=http://h:99999", "port"),
    ("prometheus=:0", "1-65535"),
    ("prometheus=", "prometheus=FILE"),
])
def test_a_bad_spec_names_the_fix(spec, said):
    with pytest.raises(ValueError, match=r".*") as err:
        parse_export(spec)
    assert said in str(err.value) and repr(spec) in str(err.value)


def test_attrs_are_key_value_with_a_plain_key():
    assert parse_attr("job.id=4711") == ("job.id", "4711") and parse_attr("k=a=b") == ("k", "a=b")
    for bad in ("job.id", "=1", "a b=1", "1x=2"):
        with pytest.raises(ValueError):
            parse_attr(bad)


@pytest.mark.parametrize("args", [["--export", "statsd=:1"], ["--export", "otlp=nohost"],
                                  ["--export-attr", "no-equals-sign"]])
def test_cli_usage_errors_exit_2_before_the_bundle_is_read(args, tmp_path):
    res = CliRunner().invoke(main, ["report", str(tmp_path / "no-such-bundle"), *args])
    assert res.exit_code == EXIT_USAGE and "Invalid value for '--export" in res.output
    assert "not a bundle" not in res.output and "no-such-bundle" not in res.output.split("Invalid value")[1]


def test_every_command_that_ends_in_a_report_takes_export():
    for cmd in ("attach", "analyze", "report"):
        res = CliRunner().invoke(main, [cmd, "--help"])
        assert "--export SCHEME=WHERE" in res.output and "--export-attr" in res.output and "--export-hold" in res.output


def test_otlp_without_the_exporter_package_is_a_usage_error_naming_the_extra(monkeypatch, tmp_path):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("opentelemetry.exporter") else real(name, *a))
    res = CliRunner().invoke(main, ["report", str(tmp_path), "--export", "otlp=http://127.0.0.1:4318"])
    assert res.exit_code == EXIT_USAGE and "pip install 'diagnose[export]'" in res.output
