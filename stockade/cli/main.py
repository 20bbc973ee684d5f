"""Entry point. Sub-commands import their machinery lazily so ``stockade --version`` starts fast."""

from __future__ import annotations

import sys

import click

from stockade import __version__


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "--version", prog_name="stockade")
def cli() -> None:
    """Stockade: run Kyverno policies offline or as an admission controller."""


@cli.command("test")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--file-name", "-f", default="kyverno-test.yaml", show_default=True, help="Test file name to look for.")
@click.option("--fail-only", is_flag=True, help="Print only the failed expectations.")
@click.option("--detailed-results", is_flag=True, help="Add the rule message to each row.")
@click.option("--output-format", "-o", type=click.Choice(["table", "json", "junit"]), default="table", show_default=True)
@click.option("--require-tests", is_flag=True, help="Fail when no test file is found.")
@click.option("--remove-color", is_flag=True, help="Disable colours.")
@click.option("--registry", is_flag=True, help="Allow registry access (verifyImages rules verify signatures).")
@click.option("--strict", is_flag=True, help="Accepted for symmetry: `test` always refuses policies with unknown fields.")
def test_command(paths: tuple[str, ...], file_name: str, fail_only: bool, detailed_results: bool, output_format: str, require_tests: bool, remove_color: bool, registry: bool, strict: bool) -> None:
    """Run Kyverno CLI test files (kyverno-test.yaml) found under PATHS."""
    from stockade.cli.test_cmd import run_tests

    sys.exit(run_tests(list(paths), file_name, fail_only, detailed_results, output_format, require_tests, remove_color, registry))


@cli.command("apply")
@click.argument("policies", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--resource", "-r", "resources", multiple=True, type=click.Path(exists=True), help="Resource file or directory (repeatable).")
@click.option("--values-file", "-f", type=click.Path(exists=True), help="Values file (kind: Values).")
@click.option("--set", "-s", "set_values", multiple=True, help="Variable values: key=value[,key=value].")
@click.option("--userinfo", "-u", type=click.Path(exists=True), help="User info file (kind: UserInfo).")
@click.option("--exception", "-e", "exceptions", multiple=True, type=click.Path(exists=True), help="PolicyException files.")
@click.option("--policy-report", "-p", is_flag=True, help="Print a PolicyReport of the results.")
@click.option("--output", "-o", "output_dir", type=click.Path(), help="Write mutated/generated resources to this file or directory.")
@click.option("--output-format", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
@click.option("--audit-warn", is_flag=True, help="Report failures of Audit rules as warn.")
@click.option("--detailed-results", is_flag=True, help="Print every rule result, not only failures.")
@click.option("--remove-color", is_flag=True, help="Disable colours.")
@click.option("--registry", is_flag=True, help="Allow registry access (verifyImages rules verify signatures).")
@click.option("--insecure-registry", "insecure_registries", multiple=True, help="Registry host allowed over plain HTTP/untrusted TLS.")
@click.option("--strict", is_flag=True, help="Refuse policies with unknown fields (exit 2) instead of warning.")
def apply_command(**options: object) -> None:
    """Apply POLICIES to resources and report the results."""
    from stockade.cli.apply_cmd import run_apply

    sys.exit(run_apply(**options))  # type: ignore[arg-type]


@cli.command("explain")
@click.argument("policies", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--resource", "-r", type=click.Path(exists=True, dir_okay=False), help="The object of a CREATE (or of --operation).")
@click.option("--old", type=click.Path(exists=True, dir_okay=False), help="The object before an UPDATE (alone: a DELETE).")
@click.option("--new", type=click.Path(exists=True, dir_okay=False), help="The object after an UPDATE.")
@click.option("--operation", type=click.Choice(["CREATE", "UPDATE", "DELETE", "CONNECT"], case_sensitive=False), help="Default: from the objects given.")
@click.option("--user", default="", help="Requesting user name.")
@click.option("--group", "groups", multiple=True, help="Requesting user's group (repeatable).")
@click.option("--output", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--remove-color", is_flag=True, help="Disable colours.")
@click.option("--registry", is_flag=True, help="Allow registry access (verifyImages rules verify signatures).")
@click.option("--insecure-registry", "insecure_registries", multiple=True, help="Registry host allowed over plain HTTP/untrusted TLS.")
@click.option("--strict", is_flag=True, help="Refuse policies with unknown fields (exit 2) instead of warning.")
def explain_command(policies: tuple[str, ...], **options: object) -> None:
    """Why would this request be admitted or denied? Every rule: matched or why not, outcome, failing definition."""
    from stockade.cli.explain_cmd import run_explain

    sys.exit(run_explain(list(policies), **options))  # type: ignore[arg-type]


@cli.command("lint")
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True))
@click.option("--strict", is_flag=True, help="Unknown fields are errors, not warnings.")
@click.option("--output-format", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True)
def lint_command(paths: tuple[str, ...], strict: bool, output_format: str) -> None:
    """Check policy files without evaluating them: schema, unknown fields, Kyverno's policy validation."""
    from stockade.cli.lint_cmd import run_lint

    sys.exit(run_lint(list(paths), strict, output_format))


def _register_optional_groups() -> None:
    """Sub-command groups living in their own modules (images, serve, sign/verify...), imported only when used."""
    lazy = {
        "images": ("stockade.cli.images_cmd", "images", "Scan registries, pick image policy tags, update manifests."),
        "serve": ("stockade.cli.serve_cmd", "serve", "Run the HTTPS admission webhook."),
        "cleanup": ("stockade.cli.serve_cmd", "cleanup", "Remove webhook configurations left behind."),
        "sign": ("stockade.cli.sign_cmd", "sign", "Sign an image with a cosign-compatible key."),
        "verify": ("stockade.cli.sign_cmd", "verify", "Verify an image signature with a public key."),
    }
    for name, (module, attribute, help_text) in lazy.items():
        cli.add_command(_LazyCommand(name, module, attribute, help_text))


class _LazyCommand(click.Command):
    """A command whose implementation module is imported on first use, keeping start-up fast."""

    def __init__(self, name: str, module: str, attribute: str, help_text: str) -> None:
        super().__init__(name, help=help_text, context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []})
        self._module = module
        self._attribute = attribute

    def _target(self) -> click.Command:
        import importlib

        try:
            command: click.Command = getattr(importlib.import_module(self._module), self._attribute)
            return command
        except (ImportError, AttributeError) as exc:
            raise click.ClickException(f"'{self.name}' is not available in this build ({exc})") from None

    def invoke(self, ctx: click.Context) -> object:
        target = self._target()
        return target.main(args=ctx.args, prog_name=f"stockade {self.name}", standalone_mode=False)


_register_optional_groups()


def main() -> None:
    cli(prog_name="stockade")


if __name__ == "__main__":  # pragma: no cover
    main()
