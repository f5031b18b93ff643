#!/usr/bin/env python3
"""Regenerates golden.json.gz: llama.cpp's pre-tokenizer splits (unicode_regex_split, per
LLAMA_VOCAB_PRE_TYPE regex set) of a fixed set of inputs, read by TestPreTokenizerGolden.

Usage: ./gen.py /path/to/llama.cpp COMMIT
It extracts the regex sets from src/llama-vocab.cpp (extract.py), builds harness.cpp against
src/unicode.cpp and src/unicode-data.cpp, and runs it on the inputs: the test vectors of
models/ggml-vocab-*.gguf.inp, hand-written cases, and seeded random strings over a pool of
code points of every category llama.cpp distinguishes (and invalid UTF-8).
"""
import base64, glob, gzip, json, os, random, subprocess, sys, tempfile

llama = sys.argv[1]
here = os.path.dirname(os.path.abspath(__file__))
tmp = tempfile.mkdtemp()
subprocess.run([sys.executable, os.path.join(here, 'extract.py'), llama, os.path.join(tmp, 'sets.inc')], check=True)
src = os.path.join(llama, 'src')
exe = os.path.join(tmp, 'harness')
subprocess.run(['g++', '-O2', '-std=c++17', '-I' + src, '-I' + tmp, os.path.join(here, 'harness.cpp'),
                os.path.join(src, 'unicode.cpp'), os.path.join(src, 'unicode-data.cpp'), '-o', exe], check=True)

SEP = b'\n__ggml_vocab_test__\n'
inputs = []
for f in sorted(glob.glob(os.path.join(llama, 'models', 'ggml-vocab-*.gguf.inp'))):
    raw = open(f, 'rb').read()
    for s in raw.split(SEP):
        if s and s not in inputs:
            inputs.append(s)
hand = ["", " ", "  ", "\n", "a", "'s", "'S", "'Re", "don't I'M we'LL", "<sentinel:12>x", "IMGIMGABZ IMGIMGABCDEZ IMGIMGZ",
        "\t\n    x  y", " " * 600 + "x", " " * 7 + "\n", "1234567 12 123 ab1234 x12345y", "١٢٣٤ ²³ Ⅻ ½", "Héllo Wörld",
        "e\u0301 a\u0308b \u0915\u093e\u0930", "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35", "中文字符 龥 㐀 \U0002EBF0 \u2FFC",
        "ひらがな カタカナ ｱｲｳ", "한국어 ㄱㄴ ᄀ ㄅㄆ", "…。，、“”—！।۔،", "€©∑😀 \u00a0\u3000\u2028\u0085x",
        "\u200b\ufeff\ue000\u0378", "ALLCAPS lowercase CamelCase mIxEd", "x\r\ny\r\n\r\n z", "a/b\n/c", "\x1c\x1d\x1e\x1f"]
for h in hand:
    b = h.encode('utf-8')
    if b not in inputs:
        inputs.append(b)
for b in [b'\xff', b'a\xc3', b'\xc0\x80b', b'\xed\xa0\x80', b'x\xe2\x82 y']:
    inputs.append(b)
pool = (list("abcXYZ019 \t\n\r\v\f'\"().,!?/-_$+<=>^`|~") + ["'s", "'T", "'re", "'LL", "IMGIMG", "<sentinel:", "\x1c", "\x1f",
        "é", "ß", "Ж", "α", "ŉ", "ǅ", "\u0301", "\u0308", "\u093e", "\u0e31", "一", "龥", "㐀", "あ", "ア", "ｱ", "가", "ㄱ", "ᄀ",
        "ㄅ", "٣", "²", "Ⅻ", "½", "…", "。", "，", "、", "“", "—", "！", "।", "€", "©", "∑", "😀", "\u00a0", "\u3000",
        "\u2028", "\u0085", "\u200b", "\ue000", "\u0378", "\u2ffc", "\U0002EBF0", "Ω", "Ｒ", "ｚ"])
rng = random.Random(20261201)
for _ in range(300):
    s = ''.join(rng.choice(pool) for _ in range(rng.randint(1, 24)))
    b = s.encode('utf-8')
    if rng.random() < 0.1:
        i = rng.randint(0, len(b))
        b = b[:i] + rng.choice([b'\xff', b'\x80', b'\xc3', b'\xe2\x82']) + b[i:]
    if b not in inputs:
        inputs.append(b)

out = subprocess.run([exe, 'split'], input=SEP.join(inputs) + SEP, capture_output=True, check=True).stdout.decode()
splits, cur = {}, None
for line in out.split('\n')[:-1]:
    if line.startswith('# '):
        cur = line[2:]
        splits[cur] = []
        continue
    if line.startswith('ERR'):  # llama.cpp throws (e.g. std::regex gives up): null
        print('error:', cur, repr(inputs[len(splits[cur])][:40]), line, file=sys.stderr)
        splits[cur].append(None)
        continue
    splits[cur].append([int(x) for x in line.split()])
for k, v in splits.items():
    assert len(v) == len(inputs), (k, len(v), len(inputs))
doc = {'llama_cpp': sys.argv[2],
       'inputs': [base64.b64encode(b).decode() for b in inputs], 'splits': splits}
with gzip.open(os.path.join(here, 'golden.json.gz'), 'wt') as f:
    json.dump(doc, f, separators=(',', ':'))
print(len(inputs), 'inputs', len(splits), 'regex sets')
