"""The arguments the stack gives vLLM, parsed by the real `vllm serve` of the release the stack
deploys: a flag the release renamed or dropped fails here, not in a pod's crash loop."""

from __future__ import annotations

import json
import subprocess

import pytest

from components.model_server.render import vllm_args
from settings import MODELLED_VLLM_VERSION, load_stack, parse_settings, read_stack_config, stack_file
from settings.picker import rendered_picker_config
from settings.picker_config import PRECISE_PRODUCER

pytestmark = pytest.mark.e2e

# Builds `vllm serve`'s own parser (the image's entrypoint) and prints what it made of each
# argument list, or the error it refused it with. One process: importing vLLM takes seconds.
PARSE = """
import contextlib, io, json, logging, sys
from vllm import __version__
from vllm.entrypoints.cli.serve import ServeSubcommand
from vllm.utils.argparse_utils import FlexibleArgumentParser
warnings = []
class Keep(logging.Handler):
    def emit(self, record):
        warnings.append(record.getMessage())
logging.getLogger("vllm").addHandler(Keep())
parser = FlexibleArgumentParser(prog="vllm")
ServeSubcommand().subparser_init(parser.add_subparsers(dest="subparser"))
results = []
for argv in json.loads(sys.argv[1]):
    warnings.clear()
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = parser.parse_args(["serve", *argv])
    except SystemExit:
        results.append({"error": errors.getvalue()})
        continue
    events = args.kv_events_config
    results.append({"model": args.model_tag, "port": args.port, "prefix_caching": args.enable_prefix_caching,
                    "tensor_parallel": args.tensor_parallel_size, "max_model_len": args.max_model_len,
                    "block_size": args.block_size, "scale_out": args.enable_scale_out,
                    "kv_events": None if events is None else {"enabled": events.enable_kv_cache_events,
                                                              "publisher": events.publisher,
                                                              "endpoint": events.endpoint, "topic": events.topic,
                                                              "replay_endpoint": events.replay_endpoint},
                    "warnings": [w for w in warnings if "--model" in w]})
print(json.dumps({"version": __version__, "results": results}))
"""


def parsed_by_vllm_serve(vllm_python: str, argvs: list[list[str]]) -> dict:
    result = subprocess.run([vllm_python, "-c", PARSE, json.dumps(argvs)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_vllm_serve_of_the_deployed_release_parses_every_models_arguments_and_refuses_an_unknown_flag(vllm_python):
    models = [model for stack in ("dev", "eks") for model in load_stack(stack).models]
    parsed = parsed_by_vllm_serve(vllm_python, [vllm_args(model) for model in models] + [["m", "--no-such-flag", "1"]])
    assert parsed["version"] == MODELLED_VLLM_VERSION
    *accepted, refused = parsed["results"]
    for model, result in zip(models, accepted):
        assert "error" not in result, result
        assert result["model"] == model.model and result["port"] == model.port
        assert result["prefix_caching"] is True and result["max_model_len"] == model.max_model_len
        assert result["warnings"] == []
    assert "--no-such-flag" in refused["error"]


def test_vllm_serve_reads_the_precise_index_arguments_as_the_picker_expects_them(vllm_python):
    raw, _ = read_stack_config(stack_file("eks"))
    models = parse_settings({**raw, "routing.prefixIndex": "precise", "routing.blockSize": "128"}, stack="eks").models
    parsed = parsed_by_vllm_serve(vllm_python, [vllm_args(model) for model in models])
    for model, result in zip(models, parsed["results"]):
        assert "error" not in result, result
        (producer,) = [p for p in rendered_picker_config(model)["plugins"] if p["type"] == PRECISE_PRODUCER]
        assert result["block_size"] == producer["parameters"]["tokenProcessorConfig"]["blockSizeTokens"] == 128
        assert result["scale_out"] is True and result["prefix_caching"] is True
        assert result["kv_events"] == {"enabled": True, "publisher": "zmq", "endpoint": "tcp://*:5557",
                                       "topic": f"kv@$(POD_IP)@{model.model}", "replay_endpoint": None}
