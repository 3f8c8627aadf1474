/*
 * writer.c: a prototype of a native writer for promoter's apply phase (not shipped).
 *
 * What it does: reads a plan over stdin (the framed format below), writes every new
 * file to its journaled temp name beside the target through a descriptor chain opened
 * from the worktree root, makes the temps durable (an fsync each, or one syncfs a
 * group), then puts each change in place by compare-and-swap in plan order and reports
 * one result line a change on stdout, and at the end makes every touched directory
 * durable (an fsync each, or one syncfs) and says so. Between staging and placing it
 * waits for one byte from its caller: 'P' to place (the caller has journaled the
 * directories the staging made and checked its lock and fence), anything else to drop
 * its temps and stop. SIGTERM stops it between two placed changes.
 *
 * Per change, at the system-call level, what promoter's applier does
 * (promoter/engine/operation/apply.py with promoter/fs):
 *   - each directory is walked to once from the root fd, openat(O_NOFOLLOW|O_DIRECTORY)
 *     per component (mkdirat for a missing one), same device as the root, and held;
 *   - before and after every write, replace and unlink, the held directory's chain is
 *     re-checked by one openat2(RESOLVE_BENEATH|NO_SYMLINKS|NO_MAGICLINKS|NO_XDEV) and
 *     the same (device, inode) for it and, by "..", for each ancestor up to the root;
 *   - the leaf is read without following it (O_NOFOLLOW|O_NONBLOCK, a regular file,
 *     same mount id by statx) and hashed: it must be the expected old state;
 *   - the temp: openat(O_CREAT|O_EXCL|O_NOFOLLOW), the bytes (inline, or copied from a
 *     blob file) hashed while written and refused when not the expected sha256, the
 *     mode rule of protocol: documents#written-file-mode, fsync (or none, and one syncfs per group);
 *   - create: renameat2(RENAME_NOREPLACE); modify: renameat2(RENAME_EXCHANGE), then the
 *     displaced file read back at the temp name (same inode, expected bytes, one link)
 *     and only then unlinked, exchanged back otherwise; delete: renamed aside to its
 *     temp name (RENAME_NOREPLACE), read back the same way, unlinked, put back otherwise.
 * Nothing is unlinked that is not provably its own: a temp it made (same inode), or the
 * exact expected old state it displaced.
 *
 * The plan (integers little-endian):
 *   header:  "PNW1", u32 flags (bit 0: group syncs), u32 group size (temps per syncfs)
 *   change:  u8 op 'C' create | 'M' modify | 'D' delete | 'R' read back, u32 seq,
 *            u16 length + path (relative, '/'-separated bytes), u16 length + temp name,
 *            u32 old git mode, u32 new git mode (0100644 or 0100755; 0 for missing),
 *            32 bytes old sha256 (zeros for a create), 32 bytes new sha256 (zeros for a
 *            delete), u8 source 'I' (u64 length + bytes) | 'B' (u16 length + blob file
 *            path) | 'N' (a delete)
 *            (a read back 'R': the same fields, an empty temp name, source 'N')
 *   end:     u8 'E'
 *   then, after "staged": u8 'P' (place) or anything else (abandon)
 * Results, one line each, on stdout:
 *   "dir <path>"                   a directory the staging made (before "staged")
 *   "<seq> R file <sha256> <mode>" what a read-back found ("missing", "other")
 *   "staged N"                     every temp written and durable
 *   "<seq> <op> ok <inode>"        a change in place (inode 0 for a delete)
 *   "<seq> <op> already"           the target already held the new state
 *   "<seq> <op> refused <what> <errno>"   then nothing more is placed; exit 1
 *   "stopped <seq>"                SIGTERM: <seq> not placed, temps dropped; exit 3
 *   "abandoned"                    no 'P' after staging: temps dropped; exit 4
 *   "synced N"                     N touched directories durable; exit 0
 *
 * Deliberately not here: verification, the journal, receipts, recovery, symlinks and
 * submodules in the plan, kept-file naming (a refusal after a rename leaves the bytes
 * under the temp name and says so), the fallbacks for kernels without renameat2 or
 * openat2 (it refuses instead), the nested-repository (.git) check of each component
 * beyond the lexical one. A bench prototype: promoter does not build, ship or run it.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <openssl/evp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <strings.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#define CHUNK (1 << 20)
#define MAX_DEPTH 64

static int root_fd = -1;
static int sync_fd = -1; /* our own descriptor for syncfs, opened before any write */
static dev_t root_dev;
static ino_t root_ino;
static uint64_t root_mnt;
static int grouped;
static unsigned group_size = 64;
static mode_t umask_now;
static unsigned char *buffer;
static volatile sig_atomic_t stopping;

static void on_term(int sig) { (void)sig; stopping = 1; }

/* --- input ------------------------------------------------------------------------- */

static unsigned char inbuf[1 << 16];
static size_t in_len, in_pos;

static void read_exact(void *out, size_t n)
{
    unsigned char *dst = out;
    while (n > 0) {
        if (in_pos == in_len) {
            ssize_t got = read(0, inbuf, sizeof inbuf);
            if (got < 0 && errno == EINTR)
                continue;
            if (got <= 0) {
                printf("- - refused truncated-plan %d\n", got < 0 ? errno : 0);
                exit(2);
            }
            in_len = (size_t)got;
            in_pos = 0;
        }
        size_t take = in_len - in_pos < n ? in_len - in_pos : n;
        memcpy(dst, inbuf + in_pos, take);
        in_pos += take;
        dst += take;
        n -= take;
    }
}

static uint16_t read_u16(void) { uint16_t v; read_exact(&v, 2); return v; }
static uint32_t read_u32(void) { uint32_t v; read_exact(&v, 4); return v; }
static uint64_t read_u64(void) { uint64_t v; read_exact(&v, 8); return v; }

static char *read_str16(void)
{
    uint16_t n = read_u16();
    char *s = malloc((size_t)n + 1);
    read_exact(s, n);
    s[n] = 0;
    if (strlen(s) != n) { /* a NUL inside */
        printf("- - refused nul-in-name 0\n");
        exit(2);
    }
    return s;
}

/* --- held directories -------------------------------------------------------------- */

struct dir {
    char *path;                 /* "" for the root */
    int fd;
    int depth;                  /* components below the root */
    dev_t dev[MAX_DEPTH];       /* identities, first component down to this one */
    ino_t ino[MAX_DEPTH];
    int touched;
};

static struct dir **table;
static size_t table_size = 1 << 12, table_used;
static struct dir **touched;
static size_t touched_n;

static uint64_t fnv(const char *s)
{
    uint64_t h = 1469598103934665603ULL;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ULL;
    return h;
}

static struct dir **slot_of(const char *path)
{
    size_t i = fnv(path) & (table_size - 1);
    while (table[i] && strcmp(table[i]->path, path) != 0)
        i = (i + 1) & (table_size - 1);
    return &table[i];
}

static void grow(void)
{
    struct dir **old = table;
    size_t old_size = table_size;
    table_size *= 2;
    table = calloc(table_size, sizeof *table);
    for (size_t i = 0; i < old_size; i++)
        if (old[i])
            *slot_of(old[i]->path) = old[i];
    free(old);
}

static int bad_component(const char *c)
{
    return !*c || !strcmp(c, ".") || !strcmp(c, "..") || !strcasecmp(c, ".git");
}

static void drop_temps(void);

/* Refuse: every temp still ours is dropped first, then the refusal is reported. */
static void fail(unsigned seq, char op, const char *what, int err)
{
    drop_temps();
    printf("%u %c refused %s %d\n", seq, op, what, err);
    fflush(stdout);
    exit(1);
}

/* The held directory for "a/b", walked from the root once; ``create``: 1 make what is
 * missing, 0 refuse it, -1 answer NULL for it (a read of a leaf that may be missing). */
static struct dir *open_dir(const char *path, unsigned seq, char op, int create)
{
    struct dir **slot = slot_of(path);
    if (*slot)
        return *slot;
    struct dir *d = calloc(1, sizeof *d);
    d->path = strdup(path);
    int cur = root_fd;
    char *copy = strdup(path), *save = NULL;
    for (char *c = strtok_r(copy, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        if (bad_component(c) || d->depth == MAX_DEPTH)
            fail(seq, op, "unsafe-path", 0);
        int fd = openat(cur, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 && errno == ENOENT && create < 0) {
            if (cur != root_fd)
                close(cur);
            free(copy);
            free(d->path);
            free(d);
            return NULL;
        }
        if (fd < 0 && errno == ENOENT && create) {
            if (mkdirat(cur, c, 0777) == 0)
                printf("dir %.*s\n", (int)(c - copy + strlen(c)), path);
            else if (errno != EEXIST)
                fail(seq, op, "mkdir", errno);
            if (!grouped && fsync(cur) < 0) /* the new entry; grouped: the next syncfs */
                fail(seq, op, "fsync-dir", errno);
            fd = openat(cur, c, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        }
        if (fd < 0)
            fail(seq, op, errno == ELOOP || errno == ENOTDIR ? "unsafe-chain" : "open-dir", errno);
        struct stat st;
        if (fstat(fd, &st) < 0 || st.st_dev != root_dev)
            fail(seq, op, "unsafe-chain", errno);
        d->dev[d->depth] = st.st_dev;
        d->ino[d->depth] = st.st_ino;
        d->depth++;
        if (cur != root_fd)
            close(cur);
        cur = fd;
    }
    free(copy);
    d->fd = cur;
    if (2 * (table_used + 1) > table_size) {
        grow();
        slot = slot_of(path);
    }
    *slot = d;
    table_used++;
    return d;
}

/* The chain still in place: one openat2 beneath the root, then the ancestors by "..". */
static void recheck(struct dir *d, unsigned seq, char op)
{
    if (d->depth == 0)
        return;
    struct open_how how = {
        .flags = O_PATH | O_DIRECTORY | O_CLOEXEC,
        .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
                   RESOLVE_NO_XDEV,
    };
    int fd = (int)syscall(SYS_openat2, root_fd, d->path, &how, sizeof how);
    if (fd < 0)
        fail(seq, op, "chain-moved", errno);
    struct stat st, held;
    if (fstat(fd, &st) < 0 || fstat(d->fd, &held) < 0)
        fail(seq, op, "chain-moved", errno);
    int last = d->depth - 1;
    if (st.st_dev != d->dev[last] || st.st_ino != d->ino[last] || held.st_ino != st.st_ino)
        fail(seq, op, "chain-moved", 0);
    char up[3 * MAX_DEPTH + 1] = "..";
    for (int k = last - 1; k >= -1; k--) {
        if (fstatat(fd, up, &st, AT_SYMLINK_NOFOLLOW) < 0)
            fail(seq, op, "chain-moved", errno);
        dev_t want_dev = k >= 0 ? d->dev[k] : root_dev;
        ino_t want_ino = k >= 0 ? d->ino[k] : root_ino;
        if (st.st_dev != want_dev || st.st_ino != want_ino)
            fail(seq, op, "chain-moved", 0);
        strcat(up, "/..");
    }
    close(fd);
}

/* --- leaves ------------------------------------------------------------------------ */

struct leaf {
    int kind; /* 0 missing, 1 regular file, 2 anything else */
    ino_t ino;
    nlink_t nlink;
    mode_t mode;
    unsigned char sha[32];
};

static const unsigned char zeros[32];

static void read_leaf(struct dir *d, const char *name, struct leaf *out, unsigned seq, char op)
{
    memset(out, 0, sizeof *out);
    struct statx sx;
    if (statx(d->fd, name, AT_SYMLINK_NOFOLLOW, STATX_BASIC_STATS | STATX_MNT_ID, &sx) < 0) {
        if (errno == ENOENT)
            return;
        fail(seq, op, "stat-leaf", errno);
    }
    if (!S_ISREG(sx.stx_mode) || ((sx.stx_mask & STATX_MNT_ID) && sx.stx_mnt_id != root_mnt)) {
        out->kind = 2;
        return;
    }
    int fd = openat(d->fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT)
            return;
        out->kind = 2;
        return;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_ino != sx.stx_ino) {
        close(fd);
        out->kind = 2;
        return;
    }
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    for (;;) {
        ssize_t got = read(fd, buffer, CHUNK);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            fail(seq, op, "read-leaf", errno);
        if (got == 0)
            break;
        EVP_DigestUpdate(ctx, buffer, (size_t)got);
    }
    EVP_DigestFinal_ex(ctx, out->sha, NULL);
    EVP_MD_CTX_free(ctx);
    close(fd);
    out->kind = 1;
    out->ino = st.st_ino;
    out->nlink = st.st_nlink;
    out->mode = st.st_mode;
}

static int git_exec(mode_t mode) { return (mode & 0100) != 0; }

static int is_state(const struct leaf *l, const unsigned char *sha, uint32_t git_mode)
{
    if (!memcmp(sha, zeros, 32))
        return l->kind == 0;
    return l->kind == 1 && !memcmp(l->sha, sha, 32) && git_exec(l->mode) == (git_mode == 0100755);
}

/* --- the plan's changes ------------------------------------------------------------ */

struct change {
    unsigned seq;
    char op;
    struct dir *dir;
    char *name;
    char *temp;
    uint32_t old_mode, new_mode;
    unsigned char old_sha[32], new_sha[32];
    ino_t temp_ino; /* the temp this run made (0: none) */
};

static struct change *changes;
static size_t n_changes, cap_changes;

/* Drop one temp if it is still ours (the inode this run made). */
static void drop_temp(struct change *c)
{
    struct stat st;
    if (c->temp_ino && fstatat(c->dir->fd, c->temp, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        st.st_ino == c->temp_ino)
        unlinkat(c->dir->fd, c->temp, 0);
    c->temp_ino = 0;
}

/* Drop every temp still ours, for a refusal while staging or placing. */
static void drop_temps(void)
{
    for (size_t i = 0; i < n_changes; i++)
        drop_temp(&changes[i]);
}

static void write_all(int fd, const unsigned char *p, size_t n, struct change *c)
{
    while (n > 0) {
        ssize_t put = write(fd, p, n);
        if (put < 0 && errno == EINTR)
            continue;
        if (put < 0)
            fail(c->seq, c->op, "write-temp", errno);
        p += put;
        n -= (size_t)put;
    }
}

/* The mode rule (protocol: documents#written-file-mode): a new file 0666 & ~umask, a replaced file keeps its bits;
 * the execute bits set (or cleared) where the read bits are set. */
static mode_t temp_mode(struct change *c)
{
    mode_t perm = 0666 & ~umask_now;
    struct stat st;
    if (c->op == 'M' && fstatat(c->dir->fd, c->name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
        S_ISREG(st.st_mode))
        perm = st.st_mode & 07777;
    perm &= ~(mode_t)0111;
    if (c->new_mode == 0100755)
        perm |= (perm & 0444) >> 2;
    return perm;
}

static void stage(struct change *c, char source)
{
    recheck(c->dir, c->seq, c->op);
    mode_t perm = temp_mode(c);
    int fd = openat(c->dir->fd, c->temp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    perm);
    if (fd < 0)
        fail(c->seq, c->op, "create-temp", errno);
    struct stat st;
    if (fstat(fd, &st) < 0)
        fail(c->seq, c->op, "stat-temp", errno);
    c->temp_ino = st.st_ino;
    if ((st.st_mode & 07777) != perm && fchmod(fd, perm) < 0)
        fail(c->seq, c->op, "chmod-temp", errno);
    EVP_MD_CTX *ctx = EVP_MD_CTX_new();
    EVP_DigestInit_ex(ctx, EVP_sha256(), NULL);
    if (source == 'I') {
        uint64_t left = read_u64();
        while (left > 0) {
            size_t take = left < CHUNK ? (size_t)left : CHUNK;
            read_exact(buffer, take);
            EVP_DigestUpdate(ctx, buffer, take);
            write_all(fd, buffer, take, c);
            left -= take;
        }
    } else {
        char *blob = read_str16();
        int in = open(blob, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (in < 0)
            fail(c->seq, c->op, "open-blob", errno);
        for (;;) {
            ssize_t got = read(in, buffer, CHUNK);
            if (got < 0 && errno == EINTR)
                continue;
            if (got < 0)
                fail(c->seq, c->op, "read-blob", errno);
            if (got == 0)
                break;
            EVP_DigestUpdate(ctx, buffer, (size_t)got);
            write_all(fd, buffer, (size_t)got, c);
        }
        close(in);
        free(blob);
    }
    unsigned char sha[32];
    EVP_DigestFinal_ex(ctx, sha, NULL);
    EVP_MD_CTX_free(ctx);
    if (memcmp(sha, c->new_sha, 32) != 0)
        fail(c->seq, c->op, "bytes-not-the-blob", 0);
    if (!grouped && fsync(fd) < 0)
        fail(c->seq, c->op, "fsync-temp", errno);
    if (close(fd) < 0)
        fail(c->seq, c->op, "close-temp", errno);
    recheck(c->dir, c->seq, c->op);
}

static void group_sync(unsigned seq, char op)
{
    if (syncfs(sync_fd) < 0)
        fail(seq, op, "syncfs-temps", errno);
}

/* What was displaced to the temp name is exactly the old state seen before (same inode,
 * one link): then, and only then, it is unlinked. */
static int settle_displaced(struct change *c, ino_t old_ino)
{
    struct leaf at_temp;
    read_leaf(c->dir, c->temp, &at_temp, c->seq, c->op);
    if (at_temp.ino != old_ino || at_temp.nlink != 1 || !is_state(&at_temp, c->old_sha, c->old_mode))
        return 0;
    if (unlinkat(c->dir->fd, c->temp, 0) < 0 && errno != ENOENT)
        fail(c->seq, c->op, "unlink-displaced", errno);
    return 1;
}

static void place(struct change *c)
{
    recheck(c->dir, c->seq, c->op);
    struct leaf now;
    read_leaf(c->dir, c->name, &now, c->seq, c->op);
    if (c->op != 'D' && is_state(&now, c->new_sha, c->new_mode)) {
        drop_temp(c);
        printf("%u %c already\n", c->seq, c->op);
        return;
    }
    if (!is_state(&now, c->old_sha, c->old_mode))
        fail(c->seq, c->op, "target-drift", 0);
    long rc;
    if (c->op == 'C') {
        rc = syscall(SYS_renameat2, c->dir->fd, c->temp, c->dir->fd, c->name, RENAME_NOREPLACE);
        if (rc < 0)
            fail(c->seq, c->op, errno == EEXIST ? "target-drift" : "rename", errno);
    } else if (c->op == 'M') {
        rc = syscall(SYS_renameat2, c->dir->fd, c->temp, c->dir->fd, c->name, RENAME_EXCHANGE);
        if (rc < 0)
            fail(c->seq, c->op, errno == ENOENT ? "target-drift" : "exchange", errno);
        if (!settle_displaced(c, now.ino)) { /* not the old state: exchange back */
            rc = syscall(SYS_renameat2, c->dir->fd, c->temp, c->dir->fd, c->name,
                         RENAME_EXCHANGE);
            fail(c->seq, c->op, rc < 0 ? "kept-under-temp" : "swapped", rc < 0 ? errno : 0);
        }
    } else {
        rc = syscall(SYS_renameat2, c->dir->fd, c->name, c->dir->fd, c->temp, RENAME_NOREPLACE);
        if (rc < 0)
            fail(c->seq, c->op, errno == ENOENT ? "target-drift" : "rename-aside", errno);
        if (!settle_displaced(c, now.ino)) { /* put back, never over anything */
            rc = syscall(SYS_renameat2, c->dir->fd, c->temp, c->dir->fd, c->name,
                         RENAME_NOREPLACE);
            fail(c->seq, c->op, rc < 0 ? "kept-under-temp" : "swapped", rc < 0 ? errno : 0);
        }
    }
    unsigned long long placed = c->temp_ino; /* 0 for a delete */
    c->temp_ino = 0;
    recheck(c->dir, c->seq, c->op);
    if (!c->dir->touched) {
        c->dir->touched = 1;
        touched[touched_n++] = c->dir;
    }
    printf("%u %c ok %llu\n", c->seq, c->op, placed);
}

/* Report what is at ``path`` (a 'R' record): "<seq> R file <sha256> <git mode>",
 * "<seq> R missing" or "<seq> R other"; the chain re-checked before and after. */
static void read_back(unsigned seq, char *path)
{
    char *slash = strrchr(path, '/');
    const char *name = slash ? slash + 1 : path;
    if (slash)
        *slash = 0;
    if (bad_component(name))
        fail(seq, 'R', "unsafe-path", 0);
    struct dir *d = open_dir(slash ? path : "", seq, 'R', -1);
    struct leaf now = {0};
    if (d != NULL) {
        recheck(d, seq, 'R');
        read_leaf(d, name, &now, seq, 'R');
        recheck(d, seq, 'R');
    }
    if (now.kind != 1) {
        printf("%u R %s\n", seq, now.kind == 0 ? "missing" : "other");
        return;
    }
    char hex[65];
    for (int i = 0; i < 32; i++)
        sprintf(hex + 2 * i, "%02x", now.sha[i]);
    printf("%u R file %s %o\n", seq, hex, git_exec(now.mode) ? 0100755 : 0100644);
}

int main(int argc, char **argv)
{
    if (argc != 3 || strcmp(argv[1], "--root-fd") != 0) {
        fprintf(stderr, "usage: writer --root-fd N < plan\n");
        return 2;
    }
    root_fd = atoi(argv[2]);
    struct sigaction term = {.sa_handler = on_term};
    sigaction(SIGTERM, &term, NULL);
    buffer = malloc(CHUNK);
    table = calloc(table_size, sizeof *table);
    umask_now = umask(0);
    umask(umask_now);
    static char outbuf[1 << 16];
    setvbuf(stdout, outbuf, _IOFBF, sizeof outbuf);
    struct statx sx;
    if (statx(root_fd, "", AT_EMPTY_PATH, STATX_BASIC_STATS | STATX_MNT_ID, &sx) < 0 ||
        !S_ISDIR(sx.stx_mode))
        fail(0, '-', "root", errno);
    root_dev = makedev(sx.stx_dev_major, sx.stx_dev_minor);
    root_ino = sx.stx_ino;
    root_mnt = sx.stx_mnt_id;
    char magic[4];
    read_exact(magic, 4);
    if (memcmp(magic, "PNW1", 4) != 0)
        fail(0, '-', "not-a-plan", 0);
    grouped = read_u32() & 1;
    group_size = read_u32();
    if (grouped) { /* samples the filesystem's writeback errors before any byte is written */
        sync_fd = openat(root_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (sync_fd < 0)
            fail(0, '-', "root", errno);
    }
    unsigned in_group = 0;
    for (;;) {
        char op;
        read_exact(&op, 1);
        if (op == 'E')
            break;
        if (n_changes == cap_changes) {
            cap_changes = cap_changes ? 2 * cap_changes : 1024;
            changes = realloc(changes, cap_changes * sizeof *changes);
        }
        struct change *c = &changes[n_changes];
        memset(c, 0, sizeof *c);
        c->op = op;
        c->seq = read_u32();
        char *path = read_str16();
        c->temp = read_str16();
        c->old_mode = read_u32();
        c->new_mode = read_u32();
        read_exact(c->old_sha, 32);
        read_exact(c->new_sha, 32);
        char source;
        read_exact(&source, 1);
        if (op == 'R') { /* a read-back: what is at the path now, nothing written */
            read_back(c->seq, path);
            free(path);
            free(c->temp);
            continue;
        }
        if ((op != 'C' && op != 'M' && op != 'D') || (op == 'D') != (source == 'N') ||
            strncmp(c->temp, ".promoter-tmp-", 14) != 0 || strchr(c->temp, '/'))
            fail(c->seq, op, "bad-change", 0);
        char *slash = strrchr(path, '/');
        c->name = strdup(slash ? slash + 1 : path);
        if (slash)
            *slash = 0;
        if (bad_component(c->name))
            fail(c->seq, op, "unsafe-path", 0);
        c->dir = open_dir(slash ? path : "", c->seq, op, op != 'D');
        free(path);
        n_changes++; /* before staging: a refusal drops this temp too */
        if (op == 'D')
            continue;
        stage(c, source);
        if (grouped && ++in_group == group_size) {
            group_sync(c->seq, op);
            in_group = 0;
        }
    }
    if (grouped && in_group > 0)
        group_sync(0, '-');
    printf("staged %zu\n", n_changes);
    fflush(stdout);
    char go = 0;
    if (in_pos < in_len)
        go = (char)inbuf[in_pos++];
    else if (read(0, &go, 1) != 1)
        go = 0;
    if (go != 'P') {
        drop_temps();
        printf("abandoned\n");
        fflush(stdout);
        return 4;
    }
    touched = calloc(table_used + 1, sizeof *touched);
    for (size_t i = 0; i < n_changes; i++) {
        if (stopping) {
            drop_temps();
            printf("stopped %u\n", changes[i].seq);
            fflush(stdout);
            return 3;
        }
        place(&changes[i]);
    }
    if (grouped && touched_n > 0) {
        if (syncfs(sync_fd) < 0)
            fail(0, '-', "syncfs-dirs", errno);
    } else {
        for (size_t i = 0; i < touched_n; i++)
            if (fsync(touched[i]->fd) < 0)
                fail(0, '-', "fsync-dir", errno);
    }
    printf("synced %zu\n", touched_n);
    return fflush(stdout) == 0 ? 0 : 1;
}
