# Copied from ../shared/peers/extract_git.py (the lead's set-up helper): write a bare git directory's HEAD tree to a folder.
#     python3 benchmarks/peers/extract_git.py <git dir> <out dir>
import subprocess, sys, os
gitdir, out = sys.argv[1], sys.argv[2]
ls = subprocess.run(["git", f"--git-dir={gitdir}", "ls-tree", "-r", "-z", "HEAD"], capture_output=True, check=True).stdout.split(b"\0")
entries = []
for e in ls:
    if not e: continue
    meta, path = e.split(b"\t", 1)
    mode, typ, sha = meta.split()
    if typ != b"blob": continue
    entries.append((mode, sha.decode(), path.decode()))
p = subprocess.Popen(["git", f"--git-dir={gitdir}", "cat-file", "--batch"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
missing = []
for mode, sha, path in entries:
    p.stdin.write((sha + "\n").encode()); p.stdin.flush()
    header = p.stdout.readline().split()
    if header[1] == b"missing":
        missing.append(path); continue
    size = int(header[2]); data = p.stdout.read(size); p.stdout.read(1)
    dst = os.path.join(out, path); os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
    if mode == b"120000":
        try: os.symlink(data.decode(), dst)
        except FileExistsError: pass
        continue
    with open(dst, "wb") as f: f.write(data)
    if mode == b"100755": os.chmod(dst, 0o755)
print(f"{len(entries) - len(missing)} files written, {len(missing)} missing")
for m in missing[:30]: print("missing:", m)
