"""`rlvr-run price SPEC`: a recorded study's forecast against what it took; `--fit` refits a profile.

The forecast before a study runs is `rlvr-run SPEC --dry-run` (with --gpus, --nodes,
--gpu-type, --price, --json); this verb reads lineage, so it works during and after a run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from engine.cli.views import console, render_versus
from engine.errors import UserError

def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="spec file or spec name")
    p.add_argument("--runs-dir", default="runs", help="output root (default: runs/)")
    p.add_argument("--gpu-type", default=None, help="hardware profile the forecast uses (default: h100, or cpu "
                                                    "when no run needs a GPU)")
    p.add_argument("--gpus", type=int, default=None, help="GPUs the study ran on (default: one node)")
    p.add_argument("--nodes", type=int, default=1, help="nodes the --gpus were spread over")
    p.add_argument("--cpus", type=int, default=None, help="CPU slots the study ran on (default: this machine's cores)")
    p.add_argument("--hardware", default=None, metavar="FILE",
                   help="a hardware profiles file of your own, its profiles added over the shipped ones; with "
                        "--fit the refit profile is written there")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument("--fit", action="store_true", help="refit the profile's constants on the finished runs")
    p.add_argument("--as", dest="name", default=None,
                   help="with --fit: the new profile's name in registry/hardware.yaml (required with --fit)")
    p.set_defaults(func=command)


def command(args: argparse.Namespace) -> int:
    from engine.price.study import spec_registry, versus_lineage
    from engine.runs.lineage import LINEAGE_FILE, open_lineage
    from engine.runs.status import spec_name_of

    if args.fit and not args.name:
        raise UserError("--fit needs --as NAME: the profile it writes (e.g. --as my-cluster), so the shipped ones stay")
    name = spec_name_of(args.spec)
    path = Path(args.runs_dir) / LINEAGE_FILE
    with open_lineage(path, readonly=True) as lineage:
        if not lineage.runs(spec_name=name):
            raise UserError(f"no runs of {name!r} in {path} (specs there: {', '.join(lineage.spec_names()) or 'none'})")
        hardware = Path(args.hardware) if args.hardware else None
        options = dict(gpu_type=args.gpu_type, gpus=args.gpus, nodes=args.nodes, cpus=args.cpus, hardware=hardware)
        result = versus_lineage(lineage, name, **options)
        if args.fit:
            spec = lineage.spec(name)
            return _fit(args, lineage, name, spec_registry(spec.path if spec else None))
    if args.json:
        print(result.model_dump_json(indent=2))
    else:
        console.print(render_versus(result))
    return 0


def _fit(args: argparse.Namespace, lineage, name: str, registry) -> int:
    from engine.price.fit import fit_factors, fitted_entry, write_profile
    from engine.price.profiles import HARDWARE_FILE
    from engine.price.shapes import shape_of_lineage
    from engine.price.study import registry_with_profiles, resolve_profile

    hardware = Path(args.hardware) if args.hardware else None
    from engine.spec.registry import project_registry

    if hardware is None and registry_with_profiles(registry).resolve() == project_registry().resolve():
        # the shipped registry lives in the installed package: a refit written there is lost (or
        # breaks the install) on the next upgrade
        raise UserError(f"--fit would write into the installed package's {HARDWARE_FILE}: "
                        f"add --hardware FILE (e.g. --hardware ~/gpus.yaml) to keep the fitted profile in a file of your own")
    study = shape_of_lineage(lineage, name, registry)
    profile = resolve_profile(study, args.gpu_type, registry, hardware)
    records = lineage.plan_runs(name)
    fit = fit_factors(study, profile, records, lineage.run_times(r.id for r in lineage.runs(name)),
                      spec=lineage.spec(name))
    target = hardware or registry_with_profiles(registry) / HARDWARE_FILE
    written = write_profile(target, args.name, fitted_entry(profile, fit, name))
    factors = ", ".join(f"{group} x{f:.2f}" for group, f in fit.factors.items())
    left = f"; left out (more than one attempt): {', '.join(fit.skipped)}" if fit.skipped else ""
    console.print(f"fitted {args.name} from {profile.name} on {fit.runs} finished runs of {name} "
                  f"({', '.join(fit.used)}), each attempted once{left}: {factors}; "
                  f"mean run error {fit.error_before:.0%} → {fit.error_after:.0%}; written to {written} "
                  f"(use it: --gpu-type {args.name}" + (f" --hardware {hardware})" if hardware else ")"),
                  highlight=False, soft_wrap=True)
    return 0
