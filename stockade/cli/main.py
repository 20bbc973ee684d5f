"""Entry point. Sub-commands import their machinery lazily so ``stockade --version`` starts fast."""

from __future__ import annotations

import importlib
import sys

import click

from stockade import __version__

PROG_NAME = "stockade"
COMPLETE_VAR = "_STOCKADE_COMPLETE"  # what the completion scripts set when they ask for completions


# Sub-commands living in their own modules (images, serve, sign/verify...): imported only when used, so start-up stays
# fast; their one-line help is given here so `stockade -h` lists them without importing anything.
_LAZY_COMMANDS: dict[str, tuple[str, str, str]] = {
    "images": ("stockade.cli.images_cmd", "images", "Scan registries, pick image policy tags, update manifests."),
    "serve": ("stockade.cli.serve_cmd", "serve", "Run the HTTPS admission webhook."),
    "cleanup": ("stockade.cli.serve_cmd", "cleanup", "Remove webhook configurations left behind."),
    "sign": ("stockade.cli.sign_cmd", "sign", "Sign an image with a cosign-compatible key."),
    "verify": ("stockade.cli.sign_cmd", "verify", "Verify an image signature with a public key."),
}


class _LazyGroup(click.Group):
    """The root group: commands of ``_LAZY_COMMANDS`` are imported on first use (running them, their help, completion).

    They are real click commands once resolved, so ``-h``/``--help`` and shell completion work in them and in their
    sub-commands like in any other.
    """

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(self.commands) | set(_LAZY_COMMANDS))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.commands or cmd_name not in _LAZY_COMMANDS:
            return self.commands.get(cmd_name)
        module_name, attribute, _ = _LAZY_COMMANDS[cmd_name]
        try:
            command = getattr(importlib.import_module(module_name), attribute)
        except (ImportError, AttributeError) as exc:
            raise click.ClickException(f"'{cmd_name}' is not available in this build ({exc})") from None
        if not isinstance(command, click.Command):
            raise click.ClickException(f"'{cmd_name}' is not available in this build")
        return command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            command = self.commands.get(name)
            if command is not None:
                if not command.hidden:
                    rows.append((name, command.get_short_help_str(formatter.width - 6 - len(name))))
            else:
                rows.append((name, _LAZY_COMMANDS[name][2]))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
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
@click.argument("policies", nargs=-1, required=True, type=click.Path(exists=True, allow_dash=True))
@click.option("--resource", "--resources", "-r", "resources", multiple=True, type=click.Path(allow_dash=True), help="Resource file or directory (repeatable; - reads standard input); with --cluster, the name of a resource in the cluster.")
@click.option("--values-file", "-f", type=click.Path(exists=True, allow_dash=True), help="Values file (kind: Values).")
@click.option("--set", "-s", "set_values", multiple=True, help="Variable values: key=value[,key=value].")
@click.option("--userinfo", "-u", type=click.Path(exists=True, allow_dash=True), help="User info file (kind: UserInfo).")
@click.option("--exception", "--exceptions", "-e", "exceptions", multiple=True, type=click.Path(exists=True, allow_dash=True), help="PolicyException files.")
@click.option("--policy-report", "-p", is_flag=True, help="Print a PolicyReport of the results (on stdout, alone: messages go to stderr).")
@click.option("--output", "-o", "output_dir", type=click.Path(allow_dash=True), help="Write mutated/generated resources to this file or directory (all files or none); - prints them on stdout, alone.")
@click.option("--output-format", type=click.Choice(["yaml", "json"]), default="yaml", show_default=True)
@click.option("--audit-warn", is_flag=True, help="Report failures of Audit rules as warn.")
@click.option("--detailed-results", is_flag=True, help="Print every rule result, not only failures.")
@click.option("--remove-color", is_flag=True, help="Disable colours.")
@click.option("--registry", is_flag=True, help="Allow registry access (verifyImages rules verify signatures).")
@click.option("--insecure-registry", "insecure_registries", multiple=True, help="Registry host allowed over plain HTTP/untrusted TLS.")
@click.option("--strict", is_flag=True, help="Refuse policies with unknown fields (exit 2) instead of warning.")
@click.option("--cluster", "-c", is_flag=True, help="Evaluate the resources of the cluster the kubeconfig names: every kind the policies match; lookups go to that cluster.")
@click.option("--namespace", "-n", help="With --cluster: only the resources of this namespace.")
@click.option("--kubeconfig", type=click.Path(exists=True), help="With --cluster: the kubeconfig file (default $KUBECONFIG, ~/.kube/config).")
@click.option("--context", help="With --cluster: the kubeconfig context to use.")
@click.option("--cluster-wide-resources", is_flag=True, help="With --cluster: cluster-scoped resources only (and the --namespace's).")
@click.option("--warn-exit-code", type=int, default=0, show_default=True, help="Exit status when there are warnings (and no failure or error).")
@click.option("--warn-no-pass", is_flag=True, help="Exit with --warn-exit-code's status when no resource passed a policy.")
def apply_command(**options: object) -> None:
    """Apply POLICIES to resources and report the results.

    One input (a policy path, -r, -f, -u or -e) may be - to read standard input, e.g.
    `kustomize build | stockade apply policy.yaml -r -`.
    """
    from stockade.cli.apply_cmd import run_apply

    sys.exit(run_apply(**options))  # type: ignore[arg-type]


@cli.command("explain")
@click.argument("policies", nargs=-1, required=True, type=click.Path(exists=True, allow_dash=True))
@click.option("--resource", "-r", type=click.Path(exists=True, dir_okay=False, allow_dash=True), help="The object of a CREATE (or of --operation); - reads standard input.")
@click.option("--old", type=click.Path(exists=True, dir_okay=False, allow_dash=True), help="The object before an UPDATE (alone: a DELETE).")
@click.option("--new", type=click.Path(exists=True, dir_okay=False, allow_dash=True), help="The object after an UPDATE.")
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
@click.argument("paths", nargs=-1, required=True, type=click.Path(exists=True, allow_dash=True))
@click.option("--strict", is_flag=True, help="Unknown fields are errors, not warnings.")
@click.option("--output-format", "-o", type=click.Choice(["text", "json"]), default="text", show_default=True)
def lint_command(paths: tuple[str, ...], strict: bool, output_format: str) -> None:
    """Check policy files without evaluating them: schema, unknown fields, Kyverno's policy validation."""
    from stockade.cli.lint_cmd import run_lint

    sys.exit(run_lint(list(paths), strict, output_format))


@cli.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion_command(shell: str) -> None:
    """Print the shell completion script for SHELL.

    \b
    bash: eval "$(stockade completion bash)"   (in ~/.bashrc)
    zsh:  eval "$(stockade completion zsh)"    (in ~/.zshrc)
    fish: stockade completion fish > ~/.config/fish/completions/stockade.fish
    """
    from click.shell_completion import get_completion_class

    completion_class = get_completion_class(shell)
    if completion_class is None:  # pragma: no cover - click ships all three
        raise click.UsageError(f"no completion support for {shell}")
    click.echo(completion_class(cli, {}, PROG_NAME, COMPLETE_VAR).source())


def main() -> None:
    cli(prog_name=PROG_NAME, complete_var=COMPLETE_VAR)


if __name__ == "__main__":  # pragma: no cover
    main()
