import re, sys
src = open(sys.argv[1] + '/src/llama-vocab.cpp', encoding='utf-8').read().split('\n')
start = next(i for i,l in enumerate(src) if 'struct llm_tokenizer_bpe : llm_tokenizer {' in l)
sets = []  # (labels, [literal], byte_encode)
labels, lits, inlist, be = [], [], False, True
for l in src[start:]:
    s = l.strip()
    if s.startswith('std::vector<std::string> regex_exprs;'): break
    m = re.match(r'case LLAMA_VOCAB_PRE_TYPE_(\w+):', s)
    if m: labels.append(m.group(1)); continue
    if s == 'default:': labels.append('DEFAULT'); continue
    if s.startswith('regex_exprs = {'): inlist = True; continue
    if inlist and s.startswith('};'): inlist = False; continue
    if inlist and s.startswith('"'):
        m = re.match(r'("(?:[^"\\]|\\.)*")', s)
        lits.append(m.group(1)); continue
    if s.startswith('byte_encode = false'): be = False; continue
    if s == 'break;' or (labels and 'DEFAULT' in labels and s == '}' and lits):
        if labels:
            sets.append((labels, lits, be))
        labels, lits, be = [], [], True
        if s == '}': break
out = open(sys.argv[2], 'w', encoding='utf-8')
for labels, lits, be in sets:
    out.write('{ "%s", { %s }, %s },\n' % (','.join(labels), ', '.join(lits), 'true' if be else 'false'))
print(len(sets), 'sets', sum(len(x[0]) for x in sets), 'labels', file=sys.stderr)
