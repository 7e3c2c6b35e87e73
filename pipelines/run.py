"""`python -m pipelines.run <pipeline id> [--run <run id>]`: one run of a pipeline, in this
process (a Celery task starts it; see pipelines/runner.py). Exits 0 when stopped, 1 when the
query failed."""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pipelines.run")
    parser.add_argument("pipeline", type=int)
    parser.add_argument("--run", type=int, help="the run's row (made here when not given)")
    args = parser.parse_args(argv)
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "control.settings")
    import django

    django.setup()
    from pipelines.environment import scrub_environment
    from pipelines.models import Pipeline, PipelineRun
    from pipelines.runner import PipelineProcess

    if args.run is None:
        run = PipelineRun.objects.create(pipeline=Pipeline.objects.get(pk=args.pipeline))
    else:
        run = PipelineRun.objects.select_related("pipeline").get(
            pk=args.run, pipeline_id=args.pipeline
        )
    # Django has read its settings: Spark, started next, gets none of the control plane's.
    scrub_environment()
    return PipelineProcess(run).main()


if __name__ == "__main__":
    sys.exit(main())
