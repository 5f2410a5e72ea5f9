#!/usr/bin/env bash
# strata data encode --tokenizer: GPT-2 byte-level BPE, token for token equal to a reference
# written from the algorithm (tests/lib/bpe_reference.py: GPT-2's pattern in the `regex` module,
# lowest-rank merges; for a tiktoken file, tiktoken's reading of one) on the King James Bible and on a text of mixed scripts, emoji, combining
# marks, digits, whitespace runs and contractions, with a vocabulary the reference learns here
# and writes in the three forms strata reads (vocab.json + merges.txt, tokenizer.json, tiktoken
# ranks). Each document follows <|endoftext|>; --split-on splits files into documents; the shards
# are the same bytes for 1 and 3 threads; a model trained on BPE shards and one fine-tuned from its
# export sample text through data.tokenizer. (Equality with OpenAI's own tokenizer on GPT-2's real
# vocabulary is tests/reference/test_tokenizer_tiktoken.sh.)
source "$(dirname "$0")/../lib/common.sh"
PY="${STRATA_PYTHON3:-python3}"
"$PY" -c "import regex" 2>/dev/null || { echo "skipped: $PY lacks the regex module (Debian: python3-regex)"; exit 77; }
ref() { "$PY" "$SRC/tests/lib/bpe_reference.py" "$@"; }

bible -f Gen1:1-Rev22:21 >"$WORK/kjv.txt"
"$PY" - "$WORK/mixed.txt" <<'PY'
import sys
parts = [
    "Hello world! It's the cat's toy; they'll say we've won, I'm sure you'd agree. DON'T SHOUT 'S 'Ll",
    "Ελληνικά κείμενα με τόνους, русский текст и цифры 1234567890, 中文字符和标点。日本語のテキスト、カタカナ。",
    "العربية مع أرقام ٠١٢٣٤٥٦٧٨٩ و हिन्दी में संयुक्ताक्षर क्षत्रिय, 한국어 문장입니다.",
    "Combining: e\u0301 a\u0308 n\u0303 o\u0302\u0323 — emoji: 👍🏽 👨‍👩‍👧‍👦 🇩🇪 ❤️ 🤖, symbols ©®™ ∑∫√ ½ ⅓ Ⅻ ²³",
    "digits 3.14159 2,718 1e-9 0x1F 12345678901234567890 and ⅷ ① ⑳ 𝟘𝟙𝟚",
    "tabs\tand\t\ttabs, spaces:     five, then a newline\n\n\n   indented line\r\n  \u00a0nbsp\u3000ideographic space\u2003em space\u0085nel",
    "   leading spaces, trailing spaces   \n" * 3,
    "a" * 300 + " " + "ab" * 200 + " " + "!" * 50 + "\n",
    "Mixed'quotes' \"double\" «guillemets» ‹›, hyphen-ated, under_score, CamelCase, snake_case99, x²+y²=z²",
]
open(sys.argv[1], "w", encoding="utf-8", newline="").write("\n".join(parts) + "\n")
PY
head -c 60000 "$WORK/kjv.txt" >"$WORK/train.txt"
cat "$WORK/mixed.txt" "$WORK/mixed.txt" >>"$WORK/train.txt"
mkdir -p "$WORK/vocab"
ref train "$WORK/train.txt" 400 "$WORK/vocab"

# shard_tokens SHARD: the token ids of an llm.c shard, one per line.
shard_tokens() {
  "$PY" - "$1" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
magic, version, count = struct.unpack("<3i", data[:12])
width = 2 if magic == 20240520 else 4
ids = struct.unpack(f"<{count}{'H' if width == 2 else 'I'}", data[1024:1024 + count * width])
sys.stdout.write("".join(f"{t}\n" for t in ids))
PY
}
eot=$("$PY" -c "import json,sys; print(json.load(open(sys.argv[1]))['<|endoftext|>'])" "$WORK/vocab/vocab.json")

for text in kjv mixed; do
  for mode in merges tiktoken; do
    ref encode "$WORK/vocab" "$WORK/$text.txt" "$WORK/$text.ref" "$mode"
    { echo "$eot"; cat "$WORK/$text.ref"; } >"$WORK/$text.$mode"
  done
  for form in vocab vocab/vocab.json vocab/tokenizer.json vocab/ranks.tiktoken; do
    mode=merges
    [ "$form" = vocab/ranks.tiktoken ] && mode=tiktoken
    out="$WORK/out_${text}_${form//\//_}"
    run_expect 0 "$STRATA" data encode --tokenizer "$WORK/$form" --input "$WORK/$text.txt" --out "$out" \
      --val-fraction 0
    expect_contains "$OUT" "1 document(s), GPT-2 BPE from"
    expect_contains "$OUT" "MB/s, "  # the encoding's closing progress line
    shard_tokens "$out/train_000000.bin" >"$WORK/got"
    cmp -s "$WORK/got" "$WORK/$text.$mode" || {
      diff "$WORK/got" "$WORK/$text.$mode" | head -n 10
      fail "$text with $form: the tokens differ from the reference's"
    }
    echo "$text, $form: $(wc -l <"$WORK/got") tokens, equal to the reference's ($mode)"
  done
done

# The same shards whatever the thread count (the Bible is several chunks).
run_expect 0 "$STRATA" data encode --tokenizer "$WORK/vocab" --input "$WORK/kjv.txt" --out "$WORK/t1" --threads 1 \
  --shard-tokens 300000
run_expect 0 "$STRATA" data encode --tokenizer "$WORK/vocab" --input "$WORK/kjv.txt" --out "$WORK/t3" --threads 3 \
  --shard-tokens 300000
for f in "$WORK"/t1/*.bin; do cmp "$f" "$WORK/t3/$(basename "$f")" || fail "$(basename "$f") differs with 3 threads"; done
[ -f "$WORK/t1/train_000001.bin" ] && [ -f "$WORK/t1/val_000000.bin" ] || fail "no second train shard or no val shard"

# Documents: two files, the second split at blank lines; each document after <|endoftext|>.
printf 'first file\n' >"$WORK/d1.txt"
printf 'doc one\n\n\n\ndoc two\n\ndoc three' >"$WORK/d2.txt"
run_expect 0 "$STRATA" data encode --tokenizer "$WORK/vocab/ranks.tiktoken" --input "$WORK/d1.txt" "$WORK/d2.txt" \
  --out "$WORK/docs" --split-on '\n\n' --val-fraction 0
expect_contains "$OUT" "4 document(s)"
# Windows line endings: \r is an escape; an unknown escape is refused; a delimiter a file lacks
# leaves it one document, with a warning.
printf 'A\r\n\r\nB\r\n\r\nC' >"$WORK/crlf.txt"
run_expect 0 "$STRATA" data encode --tokenizer "$WORK/vocab/ranks.tiktoken" --input "$WORK/crlf.txt" \
  --out "$WORK/crlf" --split-on '\r\n\r\n' --val-fraction 0
expect_contains "$OUT" "3 document(s)"
run_expect 2 "$STRATA" data encode --tokenizer "$WORK/vocab/ranks.tiktoken" --input "$WORK/crlf.txt" \
  --out "$WORK/crlf" --split-on '\x'
expect_contains "$OUT" "'\\x' in '\\x' is not an escape it knows"
run_expect 0 "$STRATA" data encode --tokenizer "$WORK/vocab/ranks.tiktoken" --input "$WORK/crlf.txt" \
  --out "$WORK/crlf" --split-on '\n\n' --val-fraction 0
expect_contains "$OUT" "--split-on does not occur in $WORK/crlf.txt: the whole file is one document"
"$PY" - "$WORK/vocab" "$WORK/want_docs" "$eot" <<PY
import sys
sys.path.insert(0, "$SRC/tests/lib")
import bpe_reference
ids = []
for doc in ["first file\n", "doc one", "doc two", "doc three"]:
    ids += [int(sys.argv[3])] + bpe_reference.encode(sys.argv[1], doc, tiktoken=True)
open(sys.argv[2], "w").write("".join(f"{t}\n" for t in ids))
PY
shard_tokens "$WORK/docs/train_000000.bin" >"$WORK/got_docs"
cmp -s "$WORK/got_docs" "$WORK/want_docs" || fail "documents split at blank lines: $(paste -sd' ' "$WORK/got_docs")"
echo "documents: 4 from two files, the second split at blank lines (the empty one left out)"

# decode(encode(x)) = x for random bytes (after the leading end-of-text token's 13 bytes).
head -c 100000 /dev/urandom >"$WORK/random.bin"
run_expect 0 "$STRATA" data encode --tokenizer "$WORK/vocab/tokenizer.json" --input "$WORK/random.bin" --out "$WORK/rt" \
  --val-fraction 0
"$STRATA" data decode --tokenizer "$WORK/vocab/tokenizer.json" --input "$WORK/rt/train_*.bin" >"$WORK/random.back"
cmp <(tail -c +14 "$WORK/random.back") "$WORK/random.bin" || fail "random bytes: decode(encode(x)) differs from x"
run_expect 2 "$STRATA" data decode --tokenizer "$WORK/vocab" --input "$WORK/none_*.bin"
expect_contains "$OUT" "data decode: --input: no files match"
# Byte-level shards (data encode's default) decode without a tokenizer, byte for byte; BPE
# shards without one are refused with the reason; a reader that closes the pipe early is no error.
run_expect 0 "$STRATA" data encode --input "$WORK/random.bin" --out "$WORK/rt_bytes" --val-fraction 0
"$STRATA" data decode --input "$WORK/rt_bytes/train_*.bin" >"$WORK/bytes.back"
cmp "$WORK/bytes.back" "$WORK/random.bin" || fail "byte shards: decode(encode(x)) differs from x"
run_expect 2 "$STRATA" data decode --input "$WORK/rt/train_*.bin"
expect_contains "$OUT" "decode them with the tokenizer that encoded them (--tokenizer; without it ids are bytes, 0-255)"
set +e
"$STRATA" data decode --input "$WORK/rt_bytes/train_*.bin" 2>"$WORK/pipe.err" | head -c 10 >/dev/null
pipe_rc=${PIPESTATUS[0]}
set -e
[ "$pipe_rc" -eq 0 ] && [ ! -s "$WORK/pipe.err" ] || fail "decode | head: exit $pipe_rc, $(cat "$WORK/pipe.err")"

# A model trained on BPE shards, exported, and a fresh run initialised from the export
# (model.init_from) trains, its samples decoded with data.tokenizer and its prompt encoded with it.
ids=$((eot + 1))
run_expect 0 "$STRATA" data encode --tokenizer "$WORK/vocab" --input "$WORK/kjv.txt" --out "$WORK/bpe" --shard-tokens 200000
write_small_config "$WORK/bpe.yaml" "$WORK/bpe" "train: {iters: 2, seed: 3}" \
  "logging: {sample_interval: 2, sample_tokens: 16, sample_prompt: \"In the beginning\"}"
run_expect 0 "$STRATA" train --config "$WORK/bpe.yaml" --set model.vocab_size=$ids --set data.tokenizer="$WORK/vocab" \
  --set checkpoint.dir="$WORK/ck_bpe"
run_expect 0 "$STRATA" export --checkpoint "$WORK/ck_bpe" --out "$WORK/hf_bpe"
run_expect 0 "$STRATA" train --config "$WORK/bpe.yaml" --set model.vocab_size=$ids --set data.tokenizer="$WORK/vocab" \
  --set model.init_from="$WORK/hf_bpe" --set logging.metrics_file="$WORK/fine.jsonl"
expect_contains "$OUT" "initialised weights from $WORK/hf_bpe"
expect_contains "$OUT" "sample at step 2:"
"$PY" - "$WORK/fine.jsonl" <<'PY'
import json, sys
sample = [json.loads(l) for l in open(sys.argv[1]) if '"sample"' in l]
assert len(sample) == 1 and sample[0]["prompt"] == "In the beginning" and isinstance(sample[0]["text"], str), sample
print("fine-tuned from the export: sample", repr(sample[0]["text"]))
PY

# Errors: exit 2, naming the option and the file.
run_expect 2 "$STRATA" data encode --tokenizer "$WORK/none.json" --input "$WORK/d1.txt" --out "$WORK/e"
expect_contains "$OUT" "data encode: --tokenizer: $WORK/none.json: does not exist"
head -n 3 "$WORK/vocab/ranks.tiktoken" >"$WORK/short.tiktoken"
run_expect 2 "$STRATA" data encode --tokenizer "$WORK/short.tiktoken" --input "$WORK/d1.txt" --out "$WORK/e"
expect_contains "$OUT" "not a byte-level BPE vocabulary: byte 3 has no token"
python3 - "$WORK/vocab/tokenizer.json" "$WORK/no_eot.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1], encoding="utf-8"))
t["added_tokens"] = []
json.dump(t, open(sys.argv[2], "w", encoding="utf-8"), ensure_ascii=False)
PY
run_expect 2 "$STRATA" data encode --tokenizer "$WORK/no_eot.json" --input "$WORK/d1.txt" --out "$WORK/e"
expect_contains "$OUT" "its vocabulary has no <|endoftext|> token to separate the documents"
run_expect 2 "$STRATA" data encode --input "$WORK/d1.txt" --out "$WORK/e" --split-on x
expect_contains "$OUT" "--split-on splits documents for a BPE tokenizer's end-of-text tokens; give --tokenizer"
run_expect 2 "$STRATA" data encode --input "$WORK/d1.txt" --out "$WORK/e" --threads 4
expect_contains "$OUT" "--threads requires --tokenizer"
run_expect 2 "$STRATA" data encode --tokenizer "$WORK/vocab" --input "$WORK/d1.txt" --out "$WORK/e" --split-on ''
expect_contains "$OUT" "--split-on: empty: it splits nothing"
echo ok
