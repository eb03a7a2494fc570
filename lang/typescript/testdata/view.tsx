import React from "react";

export function App({ title }: { title: string }) {
  return <h1 className="t">{title}</h1>;
}

export const Row = ({ n }: { n: number }) => (
  <div>
    {n}
  </div>
);

export class Panel extends React.Component<{}, {}> {
  render() {
    return <section />;
  }
}
