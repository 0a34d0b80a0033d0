// The anchor colours of the server's colour maps (engine/image/cmap_tables.h: 52 anchors at
// t = i/51, each "rrggbb"), interpolated as engine/image/render.c does, for the colorbar.
export const CMAP_ANCHORS = {
  viridis: [
    '440154 46085c 471063 481769 481d6f 482475 472a7a 46307e 453781',
    '433d84 414287 3f4889 3d4e8a 3a538b 38598c 355e8d 33638d 31688e',
    '2e6d8e 2c718e 2a768e 297b8e 27808e 25848e 23898e 218e8d 20928c',
    '1f978b 1e9c89 1fa188 21a585 24aa83 28ae80 2eb37c 35b779 3dbc74',
    '46c06f 50c46a 5ac864 65cb5e 70cf57 7cd250 89d548 95d840 a2da37',
    'b0dd2f bddf26 cae11f d8e219 e5e419 f1e51d fde725',
  ].join(' ').split(' '),
  inferno: [
    '000004 02020c 050417 0a0722 10092d 160b39 1e0c45 260c51 2f0a5b',
    '380962 400a67 490b6a 510e6c 59106e 61136e 69166e 71196e 781c6d',
    '801f6c 88226a 902568 982766 a02a63 a82e5f b0315b b73557 bf3952',
    'c63d4d cc4248 d34743 d94d3d df5337 e45a31 e9612b ed6925 f1711f',
    'f47918 f78212 f98b0b fa9407 fb9d07 fca60c fcb014 fbba1f fac42a',
    'f8cd37 f6d746 f4e156 f2ea69 f2f27d f5f992 fcffa4',
  ].join(' ').split(' '),
  magma: [
    '000004 02020b 050416 090720 0e0b2b 140e36 1a1042 21114e 29115a',
    '311165 390f6e 420f75 4a1079 52137c 5a167e 621980 6a1c81 721f81',
    '792282 812581 892881 912b81 992d80 a1307e aa337d b2357b ba3878',
    'c23b75 ca3e72 d2426f d9466b e04c67 e75263 ec5860 f1605d f4695c',
    'f7725c f97b5d fb8560 fc8e64 fd9869 fea16e feaa74 feb47b febd82',
    'fec68a fecf92 fed89a fde2a3 fdebac fcf4b6 fcfdbf',
  ].join(' ').split(' '),
  plasma: [
    '0d0887 1b068d 260591 2f0596 38049a 41049d 4903a0 5102a3 5901a5',
    '6100a7 6900a8 7100a8 7801a8 8004a8 8707a6 8e0ca4 9511a1 9c179e',
    'a21d9a a82296 ae2892 b42e8d ba3388 bf3984 c43e7f c9447a cd4a76',
    'd24f71 d6556d da5b69 de6164 e26660 e66c5c e97257 ed7953 f07f4f',
    'f3854b f58c46 f79342 f99a3e fba139 fca835 fdaf31 feb72d febe2a',
    'fdc627 fcce25 fbd724 f8df25 f6e826 f3f027 f0f921',
  ].join(' ').split(' '),
};

/** The colour [r, g, b] (0..255) of t in [0, 1] in map `name`, as the server's table holds
 * it (grey and cubehelix computed as engine/image/render.c does). */
export function cmapColour(name, t) {
  t = Math.max(0, Math.min(1, t));
  if (name === 'cubehelix') {
    const amp = t * (1 - t) / 2;
    const phi = 2 * Math.PI * (0.5 / 3 - 1.5 * t);
    const c = Math.cos(phi), s = Math.sin(phi);
    const rgb = [t + amp * (-0.14861 * c + 1.78277 * s), t + amp * (-0.29227 * c - 0.90649 * s),
      t + amp * (1.97294 * c)];
    return rgb.map((v) => Math.round(255 * Math.max(0, Math.min(1, v))));
  }
  const tab = CMAP_ANCHORS[name];
  if (!tab) return [Math.round(255 * t), Math.round(255 * t), Math.round(255 * t)];
  const pos = t * (tab.length - 1);
  const k = Math.min(tab.length - 2, Math.floor(pos));
  const f = pos - k;
  const a = parseInt(tab[k], 16), b = parseInt(tab[k + 1], 16);
  return [16, 8, 0].map((sh) => Math.round(((a >> sh) & 255) + (((b >> sh) & 255) - ((a >> sh) & 255)) * f));
}

/** The stretches of engine/image/render.c (astropy's defaults): t in [0, 1] -> [0, 1]. */
export function stretchApply(name, t) {
  switch (name) {
    case 'sqrt': return Math.sqrt(t);
    case 'log': return Math.log(1000 * t + 1) / Math.log(1001);
    case 'asinh': return Math.asinh(10 * t) / Math.asinh(10);
    case 'power': return t * t;
    default: return t;
  }
}
