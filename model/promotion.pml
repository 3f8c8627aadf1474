/*
 * promoter's write protocol as a Promela model, checked exhaustively by SPIN.
 *
 * What it is: promoter's per-target steps as the code takes them (promoter/fs/atomic.py,
 * temps.py, delete.py, aside.py; promoter/engine/operation/promote.py, driver.py,
 * recover.py, rollback.py, outcome.py; promoter/domain/plan.py), one person who may at
 * any moment save over, write in place, create, delete or rename any target or its
 * directory, and crashes at any fault point followed by recovery (itself crashable) and
 * an operator's rollback (itself crashable). docs/protocol/model.md sets it beside the
 * prose.
 *
 * Every promoter action that the code marks with a fault point carries that point's name:
 * FP(name) is where `faults.point("name")` is called, and a crash may happen there.
 * model/points.txt lists, per kind of pass, the order of those names the model allows;
 * tests/model/ checks the real daemon's recorded points against it and both against
 * this file.
 *
 * Abstractions (each one a choice the docs name): a syscall (rename, exchange, a read
 * through a descriptor, an unlink by name, a write by name) is one atomic step; bytes are
 * a value per inode (a person's every write is a fresh value, promoter's are OLD(t) and
 * NEW(t), both in the audit store); a fsync is not a state change (power cuts are not in
 * this model); hard links, special files, mounts and the reserved temp names written by
 * a person are out (the code refuses the first three before any rename; the last is a
 * documented residual risk), and so is an in-place write through a descriptor opened
 * before an exchange (the other documented residual risk).
 *
 * Configurations are -D defines: NT targets, KIND0..KIND2 their kinds, DIR0 (target 0
 * is created in a directory promoter makes), MAXP person actions, MAXC crashes,
 * ROLLBACK (an operator's rollback at the end). Mutants: MUTANT_SWAPBACK_UNLINK,
 * MUTANT_CHECK_THEN_UNLINK, MUTANT_NO_VERIFY_DISPLACED, MUTANT_SETTLE_ANY.
 */

#ifndef NT
#define NT 2
#endif
#ifndef MAXP
#define MAXP 2
#endif
#ifndef MAXC
#define MAXC 1
#endif

#define MODIFY 1
#define CREATE 2
#define DELETE 3
#ifndef KIND0
#define KIND0 MODIFY
#endif
#ifndef KIND1
#define KIND1 DELETE
#endif
#ifndef KIND2
#define KIND2 CREATE
#endif

#define NI 3                   /* directory instances of a target's directory: 1 the first, 2 one a person makes */
#define NS (NT * NI)
#define NINO 20
#define S(t, i) ((t) * NI + (i))
#define OLDV(t) (1 + (t))      /* promoter's bytes: the old state (audit store) */
#define NEWV(t) (4 + (t))      /* promoter's bytes: the new state (audit store) */
#define PV(k) (8 + (k))        /* the person's k-th write */
#define ISP(v) ((v) >= 8)
#define PROMOTERS(t, v) ((v) == OLDV(t) || (v) == NEWV(t))

/* operation status (promoter/domain/status.py) */
#define ST_NONE 0
#define ST_INPROG 1
#define ST_NREC 2       /* needs_recovery */
#define ST_NRECON 3     /* needs_reconciliation */
#define ST_DONE 4       /* completed */
#define ST_REFUSED 5
#define ST_RB 6         /* rolled_back / rollback_partial / rollback_failed */
/* step status */
#define PENDING 0
#define COMPLETED 1
#define FAILED 2

byte kind[NT];
byte ic[NINO];                 /* inode -> content value */
byte nino = 1;
byte tn[NS]; byte tmp[2 * NS]; byte k1[NS]; byte k2[NS];   /* target, temp names (promotion's at MT, rollback's at RT), kept names */
#define MT 0
#define RT NS
bit  other[NS];                /* another entry the person made in that directory */
byte di[NT];                   /* the directory instance the target's path resolves to now (0: none) */
byte dnext = 2;                /* the next directory instance a mkdir makes (target 0's) */
bit  live[MAXP]; bit safe[MAXP];
bit  pdone;

/* the journal (durable) */
byte status = ST_NONE;
bit  jsteps; bit jdir; byte js[NT];
bit  rjournal; byte rjs[NT]; byte rstatus = ST_NONE;
/* the crash count and the pass that was running */
byte crashes;
byte phase;                    /* 0 promotion or its recovery, 1 rollback */

/* promoter's memory (lost on a crash) */
byte held[NT];                 /* the directory instance a pass holds for the target */
byte mine[NT];                 /* the inode promoter wrote at a temp name */
bit  kept[NT];                 /* someone else's bytes kept for this target in this pass */
bit  fail; byte v[NT];
bit  staging; bit recovering; bit made;   /* a staging pass; a recovery's pass; a directory this pass made */

/* the code's fault points (promoter/faults.py) the model's actions carry */
mtype = { after_keep, after_mkdir, after_group_sync, before_temp_named, after_temp_write, before_replace, after_exchange, before_swap_back, after_replace, before_unlink, after_move_aside, after_unlink, before_journal, after_journal, after_dir_intent, after_temps_journaled, after_replaces, after_parent_fsync, after_readback, before_receipt, after_temps_settled, rollback_before_journal, rollback_after_step, rollback_before_receipt, rollback_after_receipt };

#define FP(p) atomic { printf("FP %e t=%d\n", p, t); if :: crashes < MAXC -> crashes++; goto crash :: true -> skip fi }

/* the person's value in inode x is gone by the person's own act */
inline killed(x) {
  if :: x != 0 && ISP(ic[x]) -> live[ic[x] - 8] = 0 :: else -> skip fi
}

/* promoter unlinks name tmp[arr + s]; it must be promoter's own bytes (protocol: recovery#removal-provably-ours) */
inline unlink_own(arr, s, t) {
  d_step {
    assert(tmp[arr + s] == 0 || PROMOTERS(t, ic[tmp[arr + s]]));
    tmp[arr + s] = 0
  }
}

/* keep (aside.keep): rename temp tmp[arr + s] to a free kept name, never replacing */
inline keep(arr, s, t) {
  d_step {
    if
    :: tmp[arr + s] == 0 -> skip
    :: tmp[arr + s] != 0 && k1[s] == 0 -> k1[s] = tmp[arr + s]; tmp[arr + s] = 0
    :: tmp[arr + s] != 0 && k1[s] != 0 && k2[s] == 0 -> k2[s] = tmp[arr + s]; tmp[arr + s] = 0
    :: else -> skip       /* no kept name free: the bytes stay at the temp name, named */
    fi;
    kept[t] = 1
  }
  FP(after_keep)
}

/* remove_if(name, ours) then keep: Temps.drop_temp: the inode promoter wrote, with its bytes */
inline drop_temp(arr, s, t, newv) {
  d_step { x = tmp[arr + s] }
  if
  :: x == 0 -> skip
  :: x != 0 && x == mine[t] && ic[x] == newv -> unlink_own(arr, s, t)
  :: else -> keep(arr, s, t)
  fi
}

/* verify_chain: the held directory is still the one the path resolves to */
#define EMPTY(s) (tn[s] == 0 && tmp[MT + (s)] == 0 && tmp[RT + (s)] == 0 && k1[s] == 0 && k2[s] == 0 && !other[s])
#define CHAIN_OK(t) (di[t] == held[t] && held[t] != 0)

/* Temps: an anonymous temp written and fsynced, then named (linkat) */
inline begin_temp(t) {
  /* open_parent(create=True): a missing directory is made (Root._mkdir; EEXIST uses it) */
  if
  :: di[t] == 0 -> d_step { di[t] = dnext; dnext++; made = 1 }; FP(after_mkdir)
  :: else -> skip
  fi;
  held[t] = di[t]
}

/* Temps.end_temp: the (already durable) anonymous temp gets its journaled name (linkat) */
inline name_temp(arr, t, newv) {
  s = S(t, held[t]);
  FP(before_temp_named);
  d_step {
    if
    :: tmp[arr + s] != 0 -> fail = 1          /* the journaled name is taken: refused, left alone */
    :: else -> fail = 0; ic[nino] = newv; tmp[arr + s] = nino; mine[t] = nino; nino++
    fi
  }
  if :: !fail -> FP(after_temp_write); fail = !CHAIN_OK(t) :: else -> skip fi;
  /* a promotion's staging stops; a rollback's group leaves the step to be written on its
     own (Driver.put), which then fails at its compare-and-swap */
  if :: fail && phase == 0 -> goto failed :: fail && phase == 1 -> fail = 0 :: else -> skip fi
}

/* the displaced file is the very inode checked, with the old bytes (_exchange_in's is_old) */
#ifdef MUTANT_NO_VERIFY_DISPLACED
#define IS_OLD(x, cur, oldv) (1)                  /* a loss: removed unread */
#else
#define IS_OLD(x, cur, oldv) ((x) == (cur) && ic[x] == (oldv))
#endif

/* Swap.replace for an existing old state: exchange, verify what was displaced, swap back */
inline replace_exchange(arr, t, oldv, newv) {
  if :: !CHAIN_OK(t) -> fail = 1; drop_temp(arr, S(t, held[t]), t, newv); goto failed :: else -> skip fi;
  s = S(t, held[t]);
  d_step { cur = tn[s] }
  if
  :: cur != 0 && ic[cur] == newv -> drop_temp(arr, s, t, newv); goto placed
  :: cur != 0 && ic[cur] == oldv -> skip
  :: else -> fail = 1; drop_temp(arr, s, t, newv); goto failed
  fi;
  FP(before_replace);
  d_step {
    if
    :: tn[s] != 0 && tmp[arr + s] != 0 -> x = tn[s]; tn[s] = tmp[arr + s]; tmp[arr + s] = x
    :: else -> fail = 1                 /* ENOENT: the target went away */
    fi
  }
  if :: fail -> drop_temp(arr, s, t, newv); goto failed :: else -> skip fi;
  FP(after_exchange);
  d_step { x = tmp[arr + s] }                 /* remove_if: read the displaced file by descriptor */
  if
  :: x == 0 -> skip
  :: x != 0 && IS_OLD(x, cur, oldv) -> unlink_own(arr, s, t)
  :: else ->
     FP(before_swap_back);
     d_step {
       if
       :: tn[s] != 0 && tmp[arr + s] != 0 -> x = tn[s]; tn[s] = tmp[arr + s]; tmp[arr + s] = x
       :: else -> kept[t] = 1            /* could not put it back: kept under the temp name */
       fi
     }
#ifdef MUTANT_SWAPBACK_UNLINK
     d_step { tmp[arr + s] = 0 };             /* the loss fixed earlier: the temp removed unchecked */
#else
     drop_temp(arr, s, t, newv);
#endif
     fail = 1; goto failed
  fi;
  FP(after_replace);
  if :: !CHAIN_OK(t) -> fail = 1; goto failed :: else -> skip fi
}

/* Swap.replace for a create: renameat2(RENAME_NOREPLACE) */
inline replace_create(arr, t, newv) {
  if :: !CHAIN_OK(t) -> fail = 1; drop_temp(arr, S(t, held[t]), t, newv); goto failed :: else -> skip fi;
  s = S(t, held[t]);
  d_step { cur = tn[s] }
  if
  :: cur != 0 && ic[cur] == newv -> drop_temp(arr, s, t, newv); goto placed
  :: cur == 0 -> skip
  :: else -> fail = 1; drop_temp(arr, s, t, newv); goto failed
  fi;
  FP(before_replace);
  d_step {
    if
    :: tn[s] == 0 -> tn[s] = tmp[arr + s]; tmp[arr + s] = 0
    :: else -> fail = (ic[tn[s]] != newv)      /* EEXIST: refused unless it is new */
    fi
  }
  drop_temp(arr, s, t, newv);                 /* normally gone: the rename consumed it */
  if :: fail -> goto failed :: else -> skip fi;
  FP(after_replace);
  if :: !CHAIN_OK(t) -> fail = 1; goto failed :: else -> skip fi
}

/* Deletion.unlink_checked: move aside to the journaled temp name, verify there, unlink */
inline unlink_checked(arr, t, oldv) {
  held[t] = di[t];
  if :: held[t] == 0 -> goto placed :: else -> skip fi;   /* the directory is gone: nothing to delete */
  s = S(t, held[t]);
  d_step { cur = tn[s] }
  if
  :: cur == 0 -> goto placed
  :: cur != 0 && ic[cur] == oldv -> skip
  :: else -> fail = 1; goto failed
  fi;
  FP(before_unlink);
  if :: !CHAIN_OK(t) -> fail = 1; goto failed :: else -> skip fi;
#ifdef MUTANT_CHECK_THEN_UNLINK
  d_step { assert(tn[s] == 0 || PROMOTERS(t, ic[tn[s]])); tn[s] = 0 }; goto placed;   /* the loss fixed earlier: unlink by name */
#endif
  d_step {
    if
    :: tn[s] == 0 -> x = 0
    :: tn[s] != 0 && tmp[arr + s] != 0 -> x = 1; fail = 1      /* the temp name is taken: refused */
    :: else -> tmp[arr + s] = tn[s]; tn[s] = 0; x = 2
    fi
  }
  if :: x == 0 -> goto placed :: fail -> goto failed :: else -> skip fi;
  FP(after_move_aside);
  d_step { x = tmp[arr + s] }
  if
  :: x == 0 -> skip
  :: x != 0 && ic[x] == oldv -> unlink_own(arr, s, t)
  :: else ->
     d_step {
       if
       :: tn[s] == 0 -> tn[s] = tmp[arr + s]; tmp[arr + s] = 0; kept[t] = 1   /* put back */
       :: else -> x = 99
       fi
     }
     if :: x == 99 -> keep(arr, s, t) :: else -> skip fi;
     fail = 1; goto failed
  fi;
  FP(after_unlink)
}

/* aside.settle: recovery's decision for one journaled temp name */
inline settle(arr, t, oldv, newv, old_exists) {
  if
  :: di[t] == 0 -> skip                        /* no directory: no temp of ours can be there */
  :: else ->
     s = S(t, di[t]);
     held[t] = di[t];
     d_step { x = tmp[arr + s]; cur = tn[s] }
     if
     :: x == 0 -> skip
     :: x != 0 && (ic[x] == newv
                   || (old_exists && cur != 0 && ic[cur] == newv
#ifndef MUTANT_SETTLE_ANY
                       && ic[x] == oldv
#endif
                      )
                  ) -> unlink_own(arr, s, t)
     :: else ->
        d_step {
          if
          :: old_exists && tn[s] == 0 -> tn[s] = tmp[arr + s]; tmp[arr + s] = 0; kept[t] = 1; x = 0
          :: else -> skip
          fi
        }
        if :: x != 0 -> keep(arr, s, t) :: else -> skip fi
     fi
  fi
}

/* what a target reads as: 1 old, 2 new, 3 neither (a missing directory reads as missing) */
inline verdict_of(t, oldv, newv, old_exists, new_exists) {
  d_step {
    if :: di[t] == 0 -> x = 0 :: else -> x = tn[S(t, di[t])] fi;
    if
    :: x == 0 && !new_exists -> v[t] = 2
    :: x == 0 && !old_exists -> v[t] = 1
    :: x != 0 && new_exists && ic[x] == newv -> v[t] = 2
    :: x != 0 && old_exists && ic[x] == oldv -> v[t] = 1
    :: else -> v[t] = 3
    fi
  }
}

active proctype person() {
  byte k, t, u, s, su, x;
  do
  :: k < MAXP ->
     atomic {
     select(t : 0 .. NT - 1);
     select(u : 0 .. NT - 1);
     if
     :: di[t] != 0 -> d_step { s = S(t, di[t]); x = tn[s]; killed(x); ic[nino] = PV(k); tn[s] = nino; nino++; live[k] = 1 }   /* save by rename */
     :: di[t] != 0 && tn[S(t, di[t])] != 0 -> d_step { x = tn[S(t, di[t])]; killed(x); ic[x] = PV(k); live[k] = 1 }   /* write in place */
     :: di[t] != 0 && tn[S(t, di[t])] != 0 -> d_step { s = S(t, di[t]); x = tn[s]; killed(x); tn[s] = 0 }   /* delete */
     :: di[t] != 0 && tn[S(t, di[t])] != 0 -> d_step { s = S(t, di[t]); x = tn[s]; if :: ISP(ic[x]) -> safe[ic[x] - 8] = 1 :: else -> skip fi; tn[s] = 0 }   /* rename away */
     :: t != u && di[t] != 0 && di[u] != 0 && tn[S(t, di[t])] != 0 ->
        d_step { s = S(t, di[t]); su = S(u, di[u]); x = tn[su]; killed(x); tn[su] = tn[s]; tn[s] = 0 }   /* rename onto another target */
#ifdef DIR0
     :: t == 0 && di[0] != 0 -> di[0] = 0                                   /* rename the directory away */
     :: t == 0 && di[0] == 0 && dnext < NI -> d_step { di[0] = dnext; dnext++ }   /* mkdir it */
     :: t == 0 && di[0] != 0 -> other[S(0, di[0])] = 1                      /* another file in it */
#endif
     :: true -> skip
     fi;
     printf("PERSON action %d on %d/%d; target values %d %d\n", k, t, u, ic[tn[S(0, di[0])]], ic[tn[S(NT - 1, di[NT - 1])]]);
     k++
     }
  :: else -> break
  od;
  pdone = 1
}

active proctype promoter() {
  byte t, s, x, cur, i;
  bit blocked;

  d_step {
    kind[0] = KIND0;
#if NT > 1
    kind[1] = KIND1;
#endif
#if NT > 2
    kind[2] = KIND2;
#endif
    for (t : 0 .. NT - 1) {
      di[t] = 1;
      if :: kind[t] != CREATE -> ic[nino] = OLDV(t); tn[S(t, 1)] = nino; nino++ :: else -> skip fi
    }
#ifdef DIR0
    di[0] = 0; dnext = 1;
#endif
    t = 0
  }

promote:
  /* the read-back under the lock: every target exactly old or new, else refused */
  for (t : 0 .. NT - 1) {
    verdict_of(t, OLDV(t), NEWV(t), kind[t] != CREATE, kind[t] != DELETE);
    if :: v[t] == 3 -> status = ST_REFUSED; goto finish :: else -> skip fi
  }
  FP(before_journal);
  d_step { jsteps = 1; status = ST_INPROG; jdir = (di[0] == 0) }
  FP(after_journal);
apply:
  FP(after_dir_intent);
  staging = 1;
  for (t : 0 .. NT - 1) {        /* every temp begun (Driver.stage), then synced together */
    if :: kind[t] != DELETE && (v[t] == 1) -> begin_temp(t) :: else -> skip fi
  }
  FP(after_group_sync);
  for (t : 0 .. NT - 1) {        /* then each named (Driver.end_staging) */
    if :: kind[t] != DELETE && (v[t] == 1) -> name_temp(MT, t, NEWV(t)) :: else -> skip fi
  }
  staging = 0;
  FP(after_temps_journaled);
  for (t : 0 .. NT - 1) {
    if
    :: v[t] != 1 -> skip
    :: kind[t] == MODIFY -> replace_exchange(MT, t, OLDV(t), NEWV(t))
    :: kind[t] == CREATE -> replace_create(MT, t, NEWV(t))
    :: kind[t] == DELETE -> unlink_checked(MT, t, OLDV(t))
    fi;
placed:
    if :: phase == 1 -> goto rbstep :: else -> skip fi   /* the rollback's steps use the same moves */
  }
failed:
  if :: phase == 1 -> goto rbstep :: else -> skip fi;
  if :: staging -> goto stagefail :: else -> skip fi;
  /* place_all stopped at a failure: the staged temps not placed dropped as promoter's own */
  for (i : 0 .. NT - 1) {
    if :: kind[i] != DELETE && held[i] != 0 && mine[i] != 0 -> drop_temp(MT, S(i, held[i]), i, NEWV(i)) :: else -> skip fi
  }
  FP(after_replaces);
  FP(after_parent_fsync);
  /* outcome.finish: the read-back of every target */
  for (t : 0 .. NT - 1) {
    verdict_of(t, OLDV(t), NEWV(t), kind[t] != CREATE, kind[t] != DELETE)
  }
  FP(after_readback);
  blocked = fail;
  for (t : 0 .. NT - 1) { if :: v[t] != 2 || kept[t] -> blocked = 1 :: else -> skip fi }
  if
  :: blocked ->
     d_step {
       for (t : 0 .. NT - 1) {
         if :: v[t] == 2 -> js[t] = COMPLETED :: v[t] == 3 -> js[t] = FAILED :: else -> skip fi
       }
       status = ST_NRECON
     }
  :: else ->
     FP(before_receipt);
     d_step {
       for (t : 0 .. NT - 1) { assert(v[t] == 2); js[t] = COMPLETED }   /* completed only as read back new */
       status = ST_DONE
     }   /* the outcome, its receipt and completed: one commit (the copy is not modelled) */
  fi;
  goto rollback;

stagefail:
  /* Driver.abandon: the named temps still promoter's own dropped, the empty directories it
     made removed; refused, or needs_reconciliation when bytes were kept; a recovery's
     failed pass goes back to needs_recovery (stopped.put_back) */
  staging = 0;
  for (i : 0 .. NT - 1) {
    if :: held[i] != 0 && mine[i] != 0 -> drop_temp(MT, S(i, held[i]), i, NEWV(i)) :: else -> skip fi
  }
  skip;
#ifdef DIR0
  d_step { if :: made && di[0] != 0 && EMPTY(S(0, di[0])) -> di[0] = 0 :: else -> skip fi }
#endif
  d_step {
    if
    :: kept[0] || kept[NT - 1] -> status = ST_NRECON
    :: recovering -> status = ST_NREC
    :: else -> status = ST_REFUSED
    fi
  }
  goto rollback;

crash:
  printf("CRASH\n");
  d_step {
    for (t : 0 .. NT - 1) { held[t] = 0; mine[t] = 0; kept[t] = 0; v[t] = 0 }
    fail = 0; blocked = 0; staging = 0; recovering = 0; made = 0; x = 0; cur = 0; s = 0; t = 0; i = 0;
    if :: status == ST_INPROG -> status = ST_NREC :: else -> skip fi;
    if :: rstatus == ST_INPROG -> rstatus = ST_NREC :: else -> skip fi
  }
  if :: phase == 1 -> goto rollback :: else -> skip fi;
  if :: status != ST_NREC -> goto rollback :: else -> skip fi;

  /* recovery (recover.py): the journal's temp names settled, every target reclassified */
  d_step { status = ST_INPROG }
  if :: !jsteps -> goto promote :: else -> skip fi;
  recovering = 1;
  for (t : 0 .. NT - 1) {
    settle(MT, t, OLDV(t), NEWV(t), kind[t] != CREATE)
  }
  FP(after_temps_settled);
  blocked = 0;
  for (t : 0 .. NT - 1) {
    verdict_of(t, OLDV(t), NEWV(t), kind[t] != CREATE, kind[t] != DELETE);
    if
    :: kept[t] || v[t] == 3 || (v[t] == 1 && js[t] == COMPLETED) -> blocked = 1
    :: else -> skip
    fi
  }
  if
  :: blocked ->
     d_step {
       for (t : 0 .. NT - 1) {
         if :: v[t] == 2 -> js[t] = COMPLETED :: v[t] == 3 -> js[t] = FAILED :: else -> skip fi
       }
       status = ST_NRECON
     }
     goto rollback
  :: else -> goto apply        /* apply_changes(todo = the targets still old) */
  fi;

rollback:
  phase = 1;
#ifdef ROLLBACK
  if
  :: status == ST_DONE || status == ST_NRECON || (status == ST_RB && rstatus == ST_NREC) ->
     /* rollback.py: journaled once, its own temp names; each target by compare-and-swap */
     if
     :: !rjournal -> FP(rollback_before_journal); d_step { rjournal = 1; rstatus = ST_INPROG; status = ST_RB }
     :: else ->
        d_step { rstatus = ST_INPROG }
        for (t : 0 .. NT - 1) {     /* settle (old: the promotion's new, new: its old) */
          settle(RT, t, NEWV(t), OLDV(t), kind[t] != DELETE)
        }
     fi;
     fail = 0;
     for (t : 0 .. NT - 1) {      /* every target read once (_one_pass) */
       verdict_of(t, OLDV(t), NEWV(t), kind[t] != CREATE, kind[t] != DELETE)
     }
     for (i : 0 .. NT - 1) {      /* the temps of the writes staged together (write_grouped) */
       t = NT - 1 - i;
       if :: !kept[t] && v[t] == 2 && kind[t] != CREATE -> begin_temp(t) :: else -> skip fi
     }
     FP(after_group_sync);
     for (i : 0 .. NT - 1) {
       t = NT - 1 - i;
       if :: !kept[t] && v[t] == 2 && kind[t] != CREATE && held[t] != 0 -> name_temp(RT, t, OLDV(t)); skip :: else -> skip fi
     }
     for (i : 0 .. NT - 1) {
       t = NT - 1 - i;             /* the promotion's steps undone in reverse */
       fail = 0;
       if
       :: kept[t] || v[t] != 2 -> skip                 /* conflict, already old or restored */
       :: else ->
          rjs[t] = PENDING;                             /* write_old journaled first */
          if
          :: kind[t] == MODIFY -> replace_exchange(RT, t, NEWV(t), OLDV(t))
          :: kind[t] == DELETE -> replace_create(RT, t, OLDV(t))
          :: kind[t] == CREATE -> unlink_checked(RT, t, NEWV(t))
          fi;
          goto rbstep;
       fi;
       goto rbnext;
rbstep:
       FP(rollback_after_step);
rbnext:
       skip
     }
     /* remove_empty_dirs: a directory promoter made, only while empty */
#ifdef DIR0
     skip;
     d_step {
       if
       :: jdir && di[0] != 0 && EMPTY(S(0, di[0])) -> di[0] = 0
       :: else -> skip
       fi
     }
#endif
     FP(after_parent_fsync);
     FP(rollback_before_receipt);
     rstatus = ST_RB;
     FP(rollback_after_receipt)
  :: else -> skip
  fi;
#else
rbstep:            /* never reached: without a rollback no step runs in phase 1 */
  skip;
#endif

finish:
  (pdone);
  for (s : 0 .. NS - 1) { printf("END slot %d: target %d temp %d rtemp %d kept %d %d\n", s, ic[tn[s]], ic[tmp[MT + s]], ic[tmp[RT + s]], ic[k1[s]], ic[k2[s]]) }
  printf("END status %d rstatus %d di0 %d\n", status, rstatus, di[0]);
  /* every byte the person wrote is at a target or a kept name (or where the person moved it) */
  for (i : 0 .. MAXP - 1) {
    if
    :: live[i] && !safe[i] ->
       x = 0;
       for (s : 0 .. NS - 1) {
         t = s / NI;
         if
         :: (s % NI) == di[t] && (ic[tn[s]] == PV(i) || ic[k1[s]] == PV(i) || ic[k2[s]] == PV(i)) -> x = 1
         :: (s % NI) != di[t] && (ic[tn[s]] == PV(i) || ic[k1[s]] == PV(i) || ic[k2[s]] == PV(i)
                                  || ic[tmp[MT + s]] == PV(i) || ic[tmp[RT + s]] == PV(i)) -> x = 1   /* a directory the person moved away */
         :: else -> skip
         fi
       }
       assert(x == 1)
    :: else -> skip
    fi
  }
  /* nothing left for a second recovery to do: no temp name holds anything */
  for (t : 0 .. NT - 1) {
    if :: di[t] != 0 -> assert(tmp[MT + S(t, di[t])] == 0 && tmp[RT + S(t, di[t])] == 0) :: else -> skip fi
  }
#ifdef REACH_DONE
  assert(status != ST_DONE || crashes == 0 || live[0] == 0)   /* vacuity check: a completion after a crash and a save is reachable */
#endif
#ifdef REACH_KEPT
  assert(k1[S(0, 1)] == 0 && k1[S(NT - 1, 1)] == 0)          /* vacuity check: bytes are kept somewhere */
#endif
#ifdef REACH_ROLLED_BACK
  assert(rstatus != ST_RB || crashes == 0)                   /* vacuity check: a rollback after a crash ends */
#endif
  /* an operation never ends in progress, and completed means every target was read back new */
  assert(status != ST_INPROG && rstatus != ST_INPROG && rstatus != ST_NREC)
}
