"""`trace export` and `trace get`: your requests become a block-hash trace with the prefix structure
they had and none of their text; a public trace is taken only when its digest is the commit's."""

import hashlib
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from routing.lab import trace as trace_command
from routing.lab.export import ExportError, block_ids, export, load_salt
from routing.picker.prefix import HFTokenizerFile, picker_block_hashes, pseudo_token_bytes, server_block_keys
from routing.traces import read_trace

ROOT = Path(__file__).resolve().parents[2]
BLOCK = 8  # tokens per id: small, so short prompts span several blocks

SYSTEM = "You are the billing assistant of Example Corp. Answer from the policy below. " * 3
PROMPTS = [SYSTEM + "Question: why was I charged twice in March?",
           SYSTEM + "Question: how do I download an invoice?",
           "Summarise this call transcript for the account team: the customer asked about renewal terms.",
           SYSTEM + "Question: why was I charged twice in March?"]


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tokenizer")
    model = Tokenizer(models.BPE(unk_token="<unk>"))
    model.pre_tokenizer = pre_tokenizers.Whitespace()
    model.train_from_iterator(PROMPTS * 3, trainers.BpeTrainer(vocab_size=200, special_tokens=["<unk>"]))
    model.save(str(folder / "tokenizer.json"))
    (folder / "chat_template.jinja").write_text(
        "{% for m in messages %}<{{ m['role'] }}>{{ m['content'] }}\n{% endfor %}{% if add_generation_prompt %}"
        "<assistant>{% endif %}")
    return HFTokenizerFile(folder)


def completion(prompt, **extra):
    return {"model": "m", "prompt": prompt, **extra}


def chat(prompt):
    return {"model": "m", "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": prompt}]}


def forms(tmp_path):
    """The same four prompts in the three forms export reads."""
    workload = tmp_path / "workload.jsonl"
    workload.write_text("".join(json.dumps({"at": i * 0.5, "session": str(i), "body": completion(p, max_tokens=20)})
                                + "\n" for i, p in enumerate(PROMPTS)))
    batch = tmp_path / "batch.jsonl"
    batch.write_text("".join(json.dumps({"custom_id": f"r{i}", "method": "POST", "url": "/v1/completions",
                                         "body": completion(p)}) + "\n" for i, p in enumerate(PROMPTS)))
    logs = tmp_path / "logs.jsonl"
    logs.write_text("".join(json.dumps({"timestamp": f"2026-12-06T10:00:0{i}Z", "body": completion(p),
                                        "response": {"usage": {"completion_tokens": 30 + i}}}) + "\n"
                            for i, p in enumerate(PROMPTS)))
    return workload, batch, logs


def shared_blocks(one, other):
    """How many leading items two sequences share."""
    return next((index for index, (a, b) in enumerate(zip(one, other)) if a != b), min(len(one), len(other)))


@pytest.mark.parametrize("form", [0, 1, 2], ids=["workload", "batch", "logs"])
def test_each_form_exports_the_prefix_structure_its_tokens_have(tmp_path, tokenizer, form):
    source = forms(tmp_path)[form]
    out = tmp_path / "trace.jsonl"
    export(source, out, tokenizer, b"s" * 32, BLOCK)
    trace = read_trace(out, id_tokens=BLOCK)
    tokens = [tokenizer.encode(prompt) for prompt in PROMPTS]
    assert [request.prompt.length for request in trace.requests] == [len(t) for t in tokens]
    for i in range(len(PROMPTS)):
        for j in range(len(PROMPTS)):
            common = shared_blocks(tokens[i], tokens[j])
            # Full blocks in common, and the last partial one too when the prompts are equal.
            expected = len(trace.requests[i].prompt.ids) if tokens[i] == tokens[j] else common // BLOCK
            assert shared_blocks(trace.requests[i].prompt.ids, trace.requests[j].prompt.ids) == expected
    assert [request.output_tokens for request in trace.requests] == [[20] * 4, [16] * 4, [30, 31, 32, 33]][form]
    assert [request.at for request in trace.requests] == [[0.0, 0.5, 1.0, 1.5], [None] * 4, [0.0, 1.0, 2.0, 3.0]][form]


def test_chats_are_exported_as_their_template_renders_them(tmp_path, tokenizer):
    source = tmp_path / "chats.jsonl"
    source.write_text("".join(json.dumps(chat(p)) + "\n" for p in ("first question", "second question")))
    export(source, tmp_path / "t.jsonl", tokenizer, b"s" * 32, BLOCK)
    first, second = read_trace(tmp_path / "t.jsonl", id_tokens=BLOCK).requests
    rendered = tokenizer.encode_chat(json.dumps(chat("first question")))
    assert first.prompt.length == len(rendered)
    assert shared_blocks(first.prompt.ids, second.prompt.ids) >= len(tokenizer.encode_chat(
        json.dumps({"messages": [{"role": "system", "content": SYSTEM}]}))) // BLOCK - 1


def test_no_text_and_no_unsalted_hash_of_a_prompt_reaches_the_output(tmp_path, tokenizer):
    out = tmp_path / "trace.jsonl"
    for source in forms(tmp_path):
        export(source, out, tokenizer, b"private salt of the user 32 byte", BLOCK)
        written = out.read_text()
        # Only digits, the four keys and JSON's punctuation.
        assert set(re.sub(r'"(timestamp|input_length|output_length|hash_ids)"', "", written)) <= set("0123456789[]{}:, \n")
        numbers = set(re.findall(r"\d+", written))
        for prompt in PROMPTS:
            tokens = tokenizer.encode(prompt)
            unsalted = {*block_ids(tokens, b"", BLOCK), *server_block_keys(tokens, BLOCK), *server_block_keys(tokens, 16),
                        *picker_block_hashes("m", pseudo_token_bytes(prompt), 64, 256),
                        int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:8], "big")}
            assert not numbers & {str(value) for value in unsalted}
            # Token ids run to 200 here: any number a trace writes may be one, so a run of the
            # prompt's tokens must not appear as a run of ids.
            assert json.dumps(tokens[:6])[1:-1] not in written


def test_the_salt_file_is_made_private_and_the_same_salt_gives_the_same_ids(tmp_path, tokenizer):
    path = tmp_path / "keys" / "salt"
    salt = load_salt(path)
    assert len(salt) == 32 and path.stat().st_mode & 0o777 == 0o600 and load_salt(path) == salt
    workload = forms(tmp_path)[0]
    export(workload, tmp_path / "a.jsonl", tokenizer, salt, BLOCK)
    export(workload, tmp_path / "b.jsonl", tokenizer, salt, BLOCK)
    export(workload, tmp_path / "c.jsonl", tokenizer, b"another salt of thirty-two bytes", BLOCK)
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text() != (tmp_path / "c.jsonl").read_text()
    path.write_bytes(b"short")
    with pytest.raises(ExportError, match="holds 5 bytes; a salt needs at least 16"):
        load_salt(path)


@pytest.mark.parametrize("lines, message", [
    ([{"custom_id": "a", "method": "POST", "url": "/v1/embeddings", "body": {"model": "m", "input": "x"}}],
     "line 1: url '/v1/embeddings': only /v1/completions and /v1/chat/completions"),
    ([{"timestamp": 1, "body": completion("a")}, {"timestamp": "yesterday", "body": completion("b")}],
     "line 2: timestamp 'yesterday' is neither a number nor ISO 8601"),
    ([{"timestamp": 1, "body": completion("a")}, {"body": completion("b")}], 'line 2: the file is a request log'),
    ([{"timestamp": 0, "input_length": 3, "output_length": 1, "hash_ids": [1]}], "is a block-hash trace already"),
])
def test_export_refuses_what_it_cannot_read_with_the_line(tmp_path, tokenizer, lines, message):
    source = tmp_path / "in.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    with pytest.raises(ExportError, match=re.escape(message)):
        export(source, tmp_path / "out.jsonl", tokenizer, b"s" * 32, BLOCK)


def test_the_export_command_writes_a_trace_predict_reads(tmp_path, tokenizer):
    workload = forms(tmp_path)[0]
    run = subprocess.run([sys.executable, "-m", "routing", "trace", "export", str(workload), "--out",
                          str(tmp_path / "t.jsonl"), "--tokenizer", str(tokenizer.path), "--salt-file",
                          str(tmp_path / "salt"), "--block-tokens", str(BLOCK)],
                         cwd=ROOT, capture_output=True, text=True, check=True)
    assert "4 requests as ids of 8-token blocks" in run.stdout and "made a new salt" in run.stderr
    predicted = subprocess.run([sys.executable, "-m", "routing", "predict", "--pods", "2", "--workload",
                                str(tmp_path / "t.jsonl"), "--trace-block-tokens", str(BLOCK), "--json", "--seed", "1"],
                               cwd=ROOT, capture_output=True, text=True, check=True)
    assert json.loads(predicted.stdout)["hitRate"] > 0


def test_trace_get_takes_a_copy_only_when_it_is_the_commits_file(tmp_path):
    forged = tmp_path / "conversation_trace.jsonl"
    forged.write_text('{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [0]}\n')
    with pytest.raises(trace_command.TraceFetchError, match="is not Mooncake's conversation_trace.jsonl at 3cca71daccf2"):
        trace_command.get("conversation", tmp_path / "out.jsonl", forged)
    assert not (tmp_path / "out.jsonl").exists()
    # git's blob id is the file's identity in the commit's tree (`git hash-object`).
    assert trace_command.git_blob_id(b"hello\n") == "ce013625030ba8dba906f756967f9e9ca394464a"
