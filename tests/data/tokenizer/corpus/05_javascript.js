'use strict';

const fetchAll = async (urls) => {
  const results = await Promise.all(urls.map((u) => fetch(u).then((r) => r.json())));
  return results.filter(Boolean);
};

export default function debounce(fn, ms = 250) {
  let t;
  return (...args) => {
    clearTimeout(t);
    t = setTimeout(() => fn(...args), ms);
  };
}

console.log(`total: ${[1, 2, 3].reduce((a, b) => a + b, 0)}`); // 6
