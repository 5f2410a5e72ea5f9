#!/usr/bin/env bash
# strata's GPT-2 BPE against OpenAI's tokenizer on GPT-2's own vocabulary: the `tiktoken` npm
# package (the WASM build of OpenAI's Rust implementation, carrying the GPT-2 encoding) is
# installed into a scratch folder; GPT-2's ranks are read out of it (decode_single_token_bytes)
# into a tiktoken rank file, and `strata data encode` with that file must give tiktoken's tokens
# for the King James Bible, a text of mixed scripts, emoji, combining marks, digits, whitespace
# runs and contractions, and random bytes and invalid UTF-8 read as text (each bad byte a U+FFFD,
# as a JavaScript string holds them); `strata data decode` gives back every byte of those, of random bytes and of
# invalid UTF-8. Nothing fetched is kept. Reported skipped when node or the npm registry
# is not there.
source "$(dirname "$0")/../lib/common.sh"
command -v node >/dev/null && command -v npm >/dev/null || { echo "skipped: no node/npm"; exit 77; }
if ! timeout 180 npm install --prefix "$WORK/npm" --no-audit --no-fund tiktoken >"$WORK/npm.log" 2>&1; then
  tail -n 3 "$WORK/npm.log"
  echo "skipped: the npm registry cannot be reached, so the tiktoken package cannot be installed"
  exit 77
fi
bible -f Gen1:1-Rev22:21 >"$WORK/kjv.txt"
cat >"$WORK/mixed.txt" <<'TEXT'
Hello world! It's the cat's toy; they'll say we've won, I'm sure you'd agree. DON'T SHOUT 'S 'Ll
Ελληνικά κείμενα με τόνους, русский текст и цифры 1234567890, 中文字符和标点。日本語のテキスト、カタカナ。
العربية مع أرقام ٠١٢٣٤٥٦٧٨٩ و हिन्दी में संयुक्ताक्षर क्षत्रिय, 한국어 문장입니다.
Combining: é ä ñ ộ — emoji: 👍🏽 👨‍👩‍👧‍👦 🇩🇪 ❤️ 🤖, symbols ©®™ ∑∫√ ½ ⅓ Ⅻ ²³
digits 3.14159 2,718 1e-9 0x1F 12345678901234567890 and ⅷ ① ⑳ 𝟘𝟙𝟚
tabs	and		tabs, spaces:     five, then blank lines



   indented line   
                                                            sixty spaces, then tabs and newlines							
			
 
Mixed'quotes' "double" «guillemets» ‹›, hyphen-ated, under_score, CamelCase, snake_case99, x²+y²=z²
TEXT
# Random bytes and invalid UTF-8 as the package can take them: strings, each bad byte a U+FFFD.
head -c 200000 /dev/urandom >"$WORK/random.txt"
printf 'ok \xff\xfe caf\xc3\xa9 \xe2\x82 \xed\xa0\x80 \xc0\xaf end' >"$WORK/invalid.txt"
for name in random invalid; do
  python3 -c 'import sys; open(sys.argv[2], "w", encoding="utf-8", newline="").write(open(sys.argv[1], "rb").read().decode("utf-8", "replace"))' \
    "$WORK/$name.txt" "$WORK/${name}_replaced.txt"
done
NODE_PATH="$WORK/npm/node_modules" node - "$WORK" <<'JS'
const fs = require("fs");
const { get_encoding } = require("tiktoken");
const work = process.argv[2];
const enc = get_encoding("gpt2");
const lines = [];
for (let rank = 0; rank < 50256; ++rank)
  lines.push(Buffer.from(enc.decode_single_token_bytes(rank)).toString("base64") + " " + rank);
fs.writeFileSync(`${work}/gpt2.tiktoken`, lines.join("\n") + "\n");
for (const name of ["kjv", "mixed", "random_replaced", "invalid_replaced"]) {
  const ids = enc.encode_ordinary(fs.readFileSync(`${work}/${name}.txt`, "utf8"));
  fs.writeFileSync(`${work}/${name}.want`, [50256, ...ids].join("\n") + "\n");
}
enc.free();
JS
for name in kjv mixed random_replaced invalid_replaced; do
  run_expect 0 "$STRATA" data encode --tokenizer "$WORK/gpt2.tiktoken" --input "$WORK/$name.txt" --out "$WORK/$name" \
    --val-fraction 0
  python3 - "$WORK/$name/train_000000.bin" >"$WORK/$name.got" <<'PY'
import struct, sys
data = open(sys.argv[1], "rb").read()
count = struct.unpack("<i", data[8:12])[0]
sys.stdout.write("".join(f"{t}\n" for t in struct.unpack(f"<{count}H", data[1024:1024 + 2 * count])))
PY
  cmp -s "$WORK/$name.got" "$WORK/$name.want" || { diff "$WORK/$name.got" "$WORK/$name.want" | head; fail "$name: strata's tokens differ from tiktoken's"; }
  echo "$name: $(wc -l <"$WORK/$name.got") tokens, equal to tiktoken's (GPT-2)"
done

# decode(encode(x)) = x with GPT-2's vocabulary, for the texts above and the random bytes and
# invalid UTF-8 as they are (the decoded text starts with the leading end-of-text token's 13 bytes).
for name in kjv mixed random invalid; do
  run_expect 0 "$STRATA" data encode --tokenizer "$WORK/gpt2.tiktoken" --input "$WORK/$name.txt" --out "$WORK/rt_$name" \
    --val-fraction 0
  "$STRATA" data decode --tokenizer "$WORK/gpt2.tiktoken" --input "$WORK/rt_$name/train_*.bin" --out "$WORK/$name.back"
  [ "$(head -c 13 "$WORK/$name.back")" = "<|endoftext|>" ] || fail "$name: the decoded text does not start with <|endoftext|>"
  cmp <(tail -c +14 "$WORK/$name.back") "$WORK/$name.txt" || fail "$name: decode(encode(x)) differs from x"
done
echo "decode(encode(x)) = x for the Bible, the mixed text, 200 kB of random bytes and invalid UTF-8"
echo ok
