import json, glob, statistics as st, sys, re, collections
res = collections.defaultdict(dict)
for f in sorted(glob.glob('docs/validation/defaults/*.json')):
    m = re.match(r'.*/(.+)-k(\d+)-s(\d+)\.json', f)
    ds, k, s = m.group(1), int(m.group(2)), int(m.group(3))
    r = json.load(open(f))
    res[(ds, k)][s] = {run['strategy']: run for run in r['runs']}
def ms(xs):
    return "%.2f ± %.2f" % (st.mean(xs), st.stdev(xs) if len(xs) > 1 else 0)
print("| dataset | K | seeds | block, buffer (config.json) | corgipile final test acc | full final test acc | corgipile − full per seed | worst epoch ≥1 (corgipile − full) | worst epoch ≥1, full − full of the next seed | full-set loss corgipile | full-set loss full | loss diff |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|")
for (ds, k), seeds in sorted(res.items()):
    cf, ff, gaps, worst, lc, lf = [], [], [], (0, None), [], []
    cfg = None
    for s, runs in sorted(seeds.items()):
        c, f = runs['corgipile'], runs['full']
        mc = c.get('mount_config') or {}
        cfg = "%s, %s" % (mc.get('block_size'), mc.get('buffer'))
        ce, fe = c['epochs'], f['epochs']
        cf.append(100*ce[-1]['test_acc']); ff.append(100*fe[-1]['test_acc'])
        gaps.append(cf[-1]-ff[-1])
        for e in range(1, len(ce)):
            g = 100*(ce[e]['test_acc']-fe[e]['test_acc'])
            if g < worst[0]: worst = (g, (s, e))
        lc.append(ce[-1]['full_train_loss']); lf.append(fe[-1]['full_train_loss'])
    # seed-to-seed sd of full's test accuracy, averaged over epochs >= 1
    n = len(next(iter(seeds.values()))['full']['epochs'])
    sds = [st.stdev([100*seeds[s]['full']['epochs'][e]['test_acc'] for s in seeds]) for e in range(1, n)] if len(seeds) > 1 else [0]
    # the null: full of seed s against full of the next seed, same epochs
    ss = sorted(seeds)
    nullworst = min([100*(seeds[a]['full']['epochs'][e]['test_acc']-seeds[b]['full']['epochs'][e]['test_acc'])
                     for a, b in zip(ss, ss[1:]+ss[:1]) for e in range(1, n)] + [0])
    print("| %s | %d | %d | %s | %s | %s | %s | %+.2f (seed %s, epoch %s) | %+.2f | %s | %s | %+.2f%% |" % (
        ds, k, len(seeds), cfg, ms(cf), ms(ff), " ".join("%+.2f" % g for g in gaps), worst[0], worst[1][0] if worst[1] else '-', worst[1][1] if worst[1] else '-',
        nullworst, "%.4f ± %.4f" % (st.mean(lc), st.stdev(lc) if len(lc)>1 else 0), "%.4f ± %.4f" % (st.mean(lf), st.stdev(lf) if len(lf)>1 else 0),
        100*(st.mean(lc)/st.mean(lf)-1)))
