// The anchor colours of the server's colour maps (engine/image/cmap_tables.h: 52 anchors at
// t = i/51, each "rrggbb"; matplotlib's maps of engine/image/cmap_mpl.h: every fifth entry),
// interpolated as engine/image/render.c does, for the colorbar; NAME_r is NAME reversed.
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
  Greys: [
    'ffffff fdfdfd fafafa f8f8f8 f6f6f6 f3f3f3 f1f1f1 eeeeee eaeaea',
    'e7e7e7 e3e3e3 dfdfdf dcdcdc d8d8d8 d4d4d4 cfcfcf cbcbcb c6c6c6',
    'c2c2c2 bebebe b8b8b8 b2b2b2 ababab a5a5a5 9f9f9f 999999 939393',
    '8e8e8e 888888 838383 7d7d7d 787878 727272 6d6d6d 686868 636363',
    '5e5e5e 585858 535353 4d4d4d 464646 3f3f3f 383838 303030 292929',
    '232323 1d1d1d 171717 111111 0c0c0c 060606 000000',
  ].join(' ').split(' '),
  coolwarm: [
    '3b4cc0 4055c8 465ecf 4c66d6 536edd 5977e3 5f7fe8 6687ed 6c8ff1',
    '7396f5 7a9df8 81a4fb 88abfd 8fb1fe 96b7ff 9dbdff a3c2fe aac7fd',
    'b1cbfc b7cff9 bed2f6 c4d5f3 cad8ef cfdaea d5dbe5 dadce0 dfdbd9',
    'e4d9d2 e9d5cb edd2c3 f0cdbb f2c9b4 f5c4ac f6bea4 f7b89c f7b194',
    'f7aa8c f6a385 f59c7d f39475 f08b6e ed8366 e97a5f e57058 e16751',
    'dc5d4a d65244 d0473d ca3b37 c32e31 bb1b2c b40426',
  ].join(' ').split(' '),
  RdBu: [
    '67001f 760521 840924 930e26 a21328 b1182b b82531 bf3338 c6413e',
    'ce4f45 d55d4c db6b55 e17860 e6866a ec9374 f2a17f f5ac8b f7b799',
    'f9c2a7 fbccb4 fcd7c2 fcdecd fbe4d6 fae9df f9efe9 f8f4f2 f3f5f6',
    'ecf2f5 e4eef4 ddebf2 d5e7f1 cce2ef c0dceb b3d6e8 a7d0e4 9bc9e0',
    '8dc2dc 7eb8d7 6eaed2 5fa5cd 4f9bc7 4291c2 3b88be 3480b9 2e77b5',
    '276eb0 2065ab 1b5a9c 15508d 10457e 0a3b70 053061',
  ].join(' ').split(' '),
  twilight: [
    'e2d9e2 dcd9df d2d5db c5cfd5 b6c8cf a7c0cb 99b8c8 8cafc5 80a5c3',
    '769cc1 6e92c0 6888be 647dbc 6172ba 6067b6 5f5bb2 5e4fac 5e43a5',
    '5c379c 5a2b90 562182 4f1972 471461 3f1251 371144 32123a 331237',
    '3a113a 43123e 4f1444 5c1749 691a4d 761f4f 832550 8e2c50 983550',
    'a13f50 a94950 b15452 b75f55 bc6b59 c1775f c58468 c89073 ca9c80',
    'cda88f d1b4a0 d5bfb1 d9c9c2 ddd1d1 e0d7db e2d9e2',
  ].join(' ').split(' '),
  turbo: [
    '30123b 36215f 3b2f80 3f3e9c 424bb5 4559cb 4666dd 4773eb 4680f6',
    '458cfd 4099ff 38a5fb 2fb2f4 27bee9 1fc9dd 1ad4d0 18ddc2 1ae4b6',
    '22ebaa 2ff19b 3ff68a 52fa7a 65fd69 79fe59 8bff4b 9cfe40 a9fb39',
    'b7f735 c3f134 d0ea34 dbe236 e5d938 eecf3a f5c53a faba39 fdae35',
    'fea130 fe932a fc8423 f9751d f46617 ef5811 e84b0c e14109 d83706',
    'ce2d04 c32503 b71d02 a91601 9b0f01 8b0902 7a0403',
  ].join(' ').split(' '),
  jet: [
    '000080 000096 0000ad 0000c4 0000da 0000f1 0000ff 000cff 0020ff',
    '0034ff 0048ff 005cff 0070ff 0084ff 0098ff 00acff 00c0ff 00d4ff',
    '02e8f4 13fce4 23ffd4 33ffc4 43ffb4 53ffa4 63ff94 73ff83 83ff73',
    '94ff63 a4ff53 b4ff43 c4ff33 d4ff23 e4ff13 f4f802 ffe600 ffd300',
    'ffc100 ffae00 ff9c00 ff8900 ff7700 ff6400 ff5200 ff3f00 ff2d00',
    'ff1a00 f10800 da0000 c40000 ad0000 960000 800000',
  ].join(' ').split(' '),
};

/** The colour [r, g, b] (0..255) of t in [0, 1] in map `name`, as the server's table holds
 * it (grey and cubehelix computed as engine/image/render.c does). */
export function cmapColour(name, t) {
  t = Math.max(0, Math.min(1, t));
  if (name.endsWith('_r')) return cmapColour(name.slice(0, -2), 1 - t);
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
