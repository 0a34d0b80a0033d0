-- wrk script of bench/soak: a mixed load on the demo datasets.
--
-- Each request is drawn at random (per wrk thread, seeded from the first script argument):
--   hot     one of 16 fixed URLs (allsky_rosat HiPS tiles of Norder3, IIIF tiles of
--           horsehead and gc_2mass_k, two cutouts): fetched over and over, so cached
--   hips    a HiPS tile of allsky_rosat (whole sky: every tile exists) at Norder 5, 6 or 7,
--           random Npix (12288 + 49152 + 196608 tiles), PNG or JPEG: almost all misses
--   iiif    an IIIF tile of horsehead, gc_2mass_k, a frame of m13 or a plane of l1448_13co,
--           random region (64..512 px square) and size: misses
--   cutout  a hips2fits-style cutout of gc_2mass_k, horsehead (TAN) or allsky_rosat
--           (galactic CAR) at a random centre and fov, PNG (1 in 10 FITS): misses
-- Arguments (after "--"): SEED HOT HIPS IIIF CUTOUT (weights in percent, default 50 20 15 15).
--
-- Every answer is counted in response(): status codes, 503s split by the server's detail
-- text into "connection limit" (limits.max_connections), "busy" (limits.max_queue) and
-- other, and X-Cache HIT/MISS.  done() adds up the per-thread counters (each wrk thread
-- has its own Lua state: the threads are kept in setup() and read with thread:get()) and
-- prints "soak KEY VALUES..." lines for bench/soak.

local threads = {}
local nthreads = 0

function setup(thread)
   thread:set("tid", nthreads)
   nthreads = nthreads + 1
   table.insert(threads, thread)
end

local hot = {}
local w_hot, w_hips, w_iiif = 50, 70, 85

function init(args)
   local seed = tonumber(args[1]) or 1
   math.randomseed(seed * 7919 + (tid or 0) * 104729)
   for _ = 1, 10 do math.random() end
   local a, b, c = tonumber(args[2]), tonumber(args[3]), tonumber(args[4])
   if a and b and c then
      w_hot, w_hips, w_iiif = a, a + b, a + b + c
   end
   local paths = {}
   for _, n in ipairs({ 0, 100, 200, 300, 400, 500, 600, 700 }) do
      table.insert(paths, string.format("/hips/allsky_rosat/Norder3/Dir0/Npix%d.png", n))
   end
   for _, p in ipairs({
      "/iiif/3/horsehead/0,0,512,512/256,/0/default.png",
      "/iiif/3/horsehead/512,0,379,512/190,/0/default.png",
      "/iiif/3/horsehead/0,512,512,381/256,/0/default.jpg",
      "/iiif/3/horsehead/full/!512,512/0/default.jpg",
      "/iiif/3/gc_2mass_k/full/!512,512/0/default.png",
      "/iiif/3/gc_2mass_k/256,256,256,256/max/0/default.jpg",
      "/api/v1/cutout?dataset=gc_2mass_k&ra=266.4&dec=-28.93&fov=0.2&width=256&height=256&format=png",
      "/api/v1/cutout?dataset=horsehead&ra=85.27&dec=-2.46&fov=0.1&width=256&height=256&format=png&stretch=asinh",
   }) do
      table.insert(paths, p)
   end
   for i, p in ipairs(paths) do hot[i] = wrk.format("GET", p) end

   codes = {}
   s503 = { conn = 0, busy = 0, other = 0 }
   xcache = { hit = 0, miss = 0, none = 0 }
   sent = { hot = 0, hips = 0, iiif = 0, cutout = 0 }
end

local function rnd(lo, hi) return lo + (hi - lo) * math.random() end

local function hips_path()
   local o = math.random(5, 7)
   local n = math.random(0, 12 * 4 ^ o - 1)
   local ext = (math.random(4) == 1) and "jpg" or "png"
   return string.format("/hips/allsky_rosat/Norder%d/Dir%d/Npix%d.%s", o,
                        math.floor(n / 10000) * 10000, n, ext)
end

local iiif_sets = {
   { "horsehead", 891, 893, 0 },
   { "gc_2mass_k", 721, 720, 0 },
   { "m13", 1392, 1040, 5 },        -- frames m13~0..4
   { "l1448_13co", 105, 105, 53 },  -- planes l1448_13co~0..52
}

local function iiif_path()
   local d = iiif_sets[math.random(#iiif_sets)]
   local id = d[1]
   if d[4] > 0 then id = string.format("%s~%d", d[1], math.random(0, d[4] - 1)) end
   local side = math.random(64, math.min(512, d[2], d[3]))
   local x = math.random(0, d[2] - side)
   local y = math.random(0, d[3] - side)
   -- sizes up to the region's (IIIF 3: larger ones would need "^")
   local size = math.random(3) == 1 and "max" or string.format("%d,", math.random(32, side))
   local ext = (math.random(3) == 1) and "jpg" or "png"
   return string.format("/iiif/3/%s/%d,%d,%d,%d/%s/0/default.%s", id, x, y, side, side, size, ext)
end

local function cutout_path()
   local k = math.random(3)
   local fmt = (math.random(10) == 1) and "fits" or "png"
   if k == 1 then
      return string.format("/api/v1/cutout?dataset=gc_2mass_k&ra=%.5f&dec=%.5f&fov=%.4f" ..
                           "&width=256&height=256&format=%s", rnd(266.1, 266.7),
                           rnd(-29.2, -28.65), rnd(0.05, 0.3), fmt)
   elseif k == 2 then
      return string.format("/api/v1/cutout?dataset=horsehead&ra=%.5f&dec=%.5f&fov=%.4f" ..
                           "&width=256&height=256&format=%s&stretch=sqrt", rnd(85.19, 85.35),
                           rnd(-2.54, -2.38), rnd(0.02, 0.1), fmt)
   end
   return string.format("/api/v1/cutout?dataset=allsky_rosat&ra=%.4f&dec=%.4f&coordsys=galactic" ..
                        "&projection=CAR&fov=%.3f&width=256&height=128&format=%s",
                        rnd(-180, 180), rnd(-60, 60), rnd(5, 20), fmt)
end

function request()
   local r = math.random(100)
   if r <= w_hot then
      sent.hot = sent.hot + 1
      return hot[math.random(#hot)]
   elseif r <= w_hips then
      sent.hips = sent.hips + 1
      return wrk.format("GET", hips_path())
   elseif r <= w_iiif then
      sent.iiif = sent.iiif + 1
      return wrk.format("GET", iiif_path())
   end
   sent.cutout = sent.cutout + 1
   return wrk.format("GET", cutout_path())
end

function response(status, headers, body)
   local k = tostring(status)
   codes[k] = (codes[k] or 0) + 1
   if status == 503 then
      if body and body:find("too many connections", 1, true) then
         s503.conn = s503.conn + 1
      elseif body and body:find("server is busy", 1, true) then
         s503.busy = s503.busy + 1
      else
         s503.other = s503.other + 1
      end
   end
   local x = headers["X-Cache"] or headers["x-cache"]
   if x == "HIT" then
      xcache.hit = xcache.hit + 1
   elseif x == "MISS" then
      xcache.miss = xcache.miss + 1
   else
      xcache.none = xcache.none + 1
   end
end

function done(summary, latency, requests)
   local c, s, x, n = {}, { conn = 0, busy = 0, other = 0 }, { hit = 0, miss = 0, none = 0 },
                      { hot = 0, hips = 0, iiif = 0, cutout = 0 }
   for _, t in ipairs(threads) do
      for code, v in pairs(t:get("codes") or {}) do c[code] = (c[code] or 0) + v end
      for key, v in pairs(t:get("s503") or {}) do s[key] = s[key] + v end
      for key, v in pairs(t:get("xcache") or {}) do x[key] = x[key] + v end
      for key, v in pairs(t:get("sent") or {}) do n[key] = n[key] + v end
   end
   local e = summary.errors
   io.write(string.format("soak requests %d\n", summary.requests))
   io.write(string.format("soak duration_us %d\n", summary.duration))
   io.write(string.format("soak bytes %d\n", summary.bytes))
   io.write(string.format("soak errors %d %d %d %d %d\n", e.connect, e.read, e.write,
                          e.status, e.timeout))
   io.write(string.format("soak latency_us %d %d %d %d %d %d\n", latency:percentile(50),
                          latency:percentile(90), latency:percentile(99),
                          latency:percentile(99.9), latency.max, latency.mean))
   local keys = {}
   for code in pairs(c) do table.insert(keys, code) end
   table.sort(keys)
   for _, code in ipairs(keys) do io.write(string.format("soak code %s %d\n", code, c[code])) end
   io.write(string.format("soak s503 %d %d %d\n", s.conn, s.busy, s.other))
   io.write(string.format("soak xcache %d %d %d\n", x.hit, x.miss, x.none))
   io.write(string.format("soak sent %d %d %d %d\n", n.hot, n.hips, n.iiif, n.cutout))
end
