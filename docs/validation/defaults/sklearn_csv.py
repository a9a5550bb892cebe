# Writes sklearn's bundled datasets as CSV: a training set sorted by label
# (4 files) and a shuffled test set (25%, stratified), features scaled to [0,1].
import sys, os, numpy as np
from sklearn import datasets
from sklearn.model_selection import train_test_split
out = sys.argv[1]
for name, load in [("digits", datasets.load_digits), ("breast_cancer", datasets.load_breast_cancer), ("wine", datasets.load_wine)]:
    d = load()
    X, y = d.data.astype(float), d.target
    X = (X - X.min(0)) / np.maximum(X.max(0) - X.min(0), 1e-12)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
    o = np.argsort(ytr, kind="stable")
    Xtr, ytr = Xtr[o], ytr[o]
    for split, XX, yy, files in [("train", Xtr, ytr, 4), ("test", Xte, yte, 1)]:
        dd = os.path.join(out, name, split)
        os.makedirs(dd, exist_ok=True)
        hdr = "label," + ",".join("f%d" % i for i in range(XX.shape[1]))
        for k, idx in enumerate(np.array_split(np.arange(len(yy)), files)):
            with open(os.path.join(dd, "part-%d.csv" % k), "w") as f:
                f.write(hdr + "\n")
                for i in idx:
                    f.write("%d,%s\n" % (yy[i], ",".join("%.4f" % v for v in XX[i])))
    print(name, Xtr.shape, Xte.shape)
