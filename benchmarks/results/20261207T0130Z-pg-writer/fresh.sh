for v in fresh plain fresh; do
  case $v in fresh) E="FLARE_BENCH_FRESH=1";; plain) E="FLARE_BENCH_X=1";; esac
  env $E FLARE_BENCH_PG_ONLY=1 RUST_LOG=error ./flare-timing bench waiters --events 100000 --reps 1 --json --scattered-keys --database-url postgres://postgres@127.0.0.1:5432/postgres 2>fresh-$v.err | sed "s/^/$v /" >> fresh.jsonl
done
